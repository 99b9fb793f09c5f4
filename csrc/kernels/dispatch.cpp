// Run-time SIMD dispatch: CPUID + XGETBV decide what the CPU and OS support;
// MEDRETRIEVE_SIMD caps the choice (for tests and for suspected kernel bugs).
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/distances.h"

#if defined(MEDRETRIEVE_X86)
#include <cpuid.h>
#endif

namespace medretrieve::kernels {

const char* level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::AVX2: return "avx2";
    case SimdLevel::AVX512: return "avx512";
    case SimdLevel::AVX512VNNI: return "avx512_vnni";
  }
  return "unknown";
}

namespace {

SimdLevel detect() {
#if defined(MEDRETRIEVE_X86)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return SimdLevel::Scalar;
  const bool osxsave = ecx & (1u << 27), fma = ecx & (1u << 12), f16c = ecx & (1u << 29);
  const bool popcnt = ecx & (1u << 23);
  if (!osxsave) return SimdLevel::Scalar;
  unsigned xlo, xhi;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool ymm_state = (xlo & 0x6) == 0x6;
  const bool zmm_state = (xlo & 0xE6) == 0xE6;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return SimdLevel::Scalar;
  const bool avx2 = ebx & (1u << 5);
  const bool avx512f = ebx & (1u << 16), avx512dq = ebx & (1u << 17);
  const bool avx512bw = ebx & (1u << 30), avx512vl = ebx & (1u << 31);
  const bool vnni = ecx & (1u << 11);
  if (!(ymm_state && avx2 && fma && f16c && popcnt)) return SimdLevel::Scalar;
  if (!(zmm_state && avx512f && avx512dq && avx512bw && avx512vl)) return SimdLevel::AVX2;
  return vnni ? SimdLevel::AVX512VNNI : SimdLevel::AVX512;
#else
  return SimdLevel::Scalar;
#endif
}

SimdLevel env_cap() {
  const char* v = std::getenv("MEDRETRIEVE_SIMD");
  if (!v || !*v) return SimdLevel::AVX512VNNI;
  for (int l = 0; l <= int(SimdLevel::AVX512VNNI); ++l)
    if (std::strcmp(v, level_name(SimdLevel(l))) == 0) return SimdLevel(l);
  return SimdLevel::AVX512VNNI;  // unknown value: no cap (the Python layer warns)
}

}  // namespace

SimdLevel cpu_level() {
  static const SimdLevel level = detect();
  return level;
}

const KernelTable* table_for(SimdLevel level) {
  if (int(level) > int(cpu_level())) return nullptr;
  switch (level) {
    case SimdLevel::Scalar: return &scalar_table();
#if defined(MEDRETRIEVE_X86)
    case SimdLevel::AVX2: return &avx2_table();
    case SimdLevel::AVX512: return &avx512_table();
    case SimdLevel::AVX512VNNI: return &avx512vnni_table();
#else
    default: return nullptr;
#endif
  }
  return nullptr;
}

const KernelTable& active() {
  static const KernelTable* t = [] {
    SimdLevel cap = env_cap();
    SimdLevel use = int(cap) < int(cpu_level()) ? cap : cpu_level();
    return table_for(use);
  }();
  return *t;
}

}  // namespace medretrieve::kernels
