// Device discovery. The module links cudart statically, so it imports on a
// machine without a driver; cudaGetDeviceCount's error then says why.
#include <cstdio>
#include <mutex>

#include "cuda/common.cuh"

namespace medretrieve::cuda {
namespace {

struct Probe {
  bool ok = false;
  std::string why;
};

const Probe& probe() {
  static Probe p;
  static std::once_flag once;
  std::call_once(once, [] {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      p.why = std::string("no usable CUDA driver or device (") + cudaGetErrorString(err) + ")";
      return;
    }
    if (count == 0) {
      p.why = "no CUDA device found";
      return;
    }
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess) {
      cudaGetLastError();
      p.why = std::string("cannot query device 0 (") + cudaGetErrorString(err) + ")";
      return;
    }
    if (prop.major < 8) {
      p.why = "device 0 (" + std::string(prop.name) + ") has compute capability " + std::to_string(prop.major) + "." +
              std::to_string(prop.minor) + "; the kernels are built for sm_80 and newer";
      return;
    }
    p.ok = true;
  });
  return p;
}

}  // namespace

bool available(std::string* reason) {
  const Probe& p = probe();
  if (reason) *reason = p.why;
  return p.ok;
}

std::string device_summary() {
  detail::require_device();
  cudaDeviceProp prop;
  MR_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  // snprintf, not an ostringstream: on the H200 image (nvcc 13, GCC 13) an ostream in this nvcc-compiled file
  // crashed in its num_put facet whenever numpy had been imported before the module (cuda-gdb, 2026-12-04).
  char text[320];
  std::snprintf(text, sizeof text, "%s, %d SMs, %.1f GiB, sm_%d%d", prop.name, prop.multiProcessorCount,
                double(prop.totalGlobalMem) / double(1ull << 30), prop.major, prop.minor);
  return text;
}

namespace detail {
void require_device() {
  std::string why;
  if (!available(&why)) throw std::runtime_error("CUDA is not available: " + why);
}
}  // namespace detail

}  // namespace medretrieve::cuda
