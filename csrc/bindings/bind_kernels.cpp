// Kernel entry points for tests and diagnostics: each SIMD level can be
// called directly so Python tests compare every level with a float64 reference.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "kernels/distances.h"
#include "kernels/quantizer.h"

namespace py = pybind11;
namespace k = medretrieve::kernels;

namespace medretrieve::bindings {
namespace {

const k::KernelTable& table_named(const std::string& name) {
  for (int l = 0; l <= int(k::SimdLevel::AVX512VNNI); ++l) {
    if (name == k::level_name(k::SimdLevel(l))) {
      const k::KernelTable* t = k::table_for(k::SimdLevel(l));
      if (!t) throw std::invalid_argument("SIMD level '" + name + "' is not supported by this CPU");
      return *t;
    }
  }
  throw std::invalid_argument("unknown SIMD level '" + name + "' (expected scalar, avx2, avx512 or avx512_vnni)");
}

template <typename T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename T>
size_t same_length(const CArray<T>& a, const CArray<T>& b) {
  if (a.ndim() != 1 || b.ndim() != 1) throw std::invalid_argument("expected 1-d arrays");
  if (a.shape(0) != b.shape(0))
    throw std::invalid_argument("length mismatch: " + std::to_string(a.shape(0)) + " vs " + std::to_string(b.shape(0)));
  return size_t(a.shape(0));
}

}  // namespace

void bind_kernels(py::module_& m) {
  m.def("simd_level", [] { return std::string(k::level_name(k::active().level)); },
        "SIMD level the kernels run at (after the MEDRETRIEVE_SIMD cap).");
  m.def("cpu_simd_level", [] { return std::string(k::level_name(k::cpu_level())); },
        "Highest SIMD level this CPU supports.");
  m.def("available_simd_levels", [] {
    std::vector<std::string> out;
    for (int l = 0; l <= int(k::cpu_level()); ++l) out.emplace_back(k::level_name(k::SimdLevel(l)));
    return out;
  });
  m.def("_kernel_dot_f32", [](CArray<float> a, CArray<float> b, const std::string& level) {
    size_t n = same_length(a, b);
    return table_named(level).dot_f32(a.data(), b.data(), n);
  });
  m.def("_kernel_l2sq_f32", [](CArray<float> a, CArray<float> b, const std::string& level) {
    size_t n = same_length(a, b);
    return table_named(level).l2sq_f32(a.data(), b.data(), n);
  });
  m.def("_kernel_dot_i8", [](CArray<int8_t> a, CArray<int8_t> b, const std::string& level) {
    size_t n = same_length(a, b);
    if (n > k::kMaxInt8Dim) throw std::invalid_argument("int8 vectors longer than 131072 are not supported");
    return table_named(level).dot_i8(a.data(), b.data(), n);
  });
  m.def("_quantize_i8", [](CArray<float> x, std::optional<CArray<float>> centre) {
    if (x.ndim() != 1) throw std::invalid_argument("expected a 1-d array");
    size_t n = size_t(x.shape(0));
    if (centre && (centre->ndim() != 1 || size_t(centre->shape(0)) != n))
      throw std::invalid_argument("centre must have the vector's length");
    py::array_t<int8_t> code(n);
    float scale = k::quantize_i8(x.data(), centre ? centre->data() : nullptr, n, code.mutable_data());
    return py::make_tuple(code, scale);
  }, py::arg("x"), py::arg("centre") = py::none());
}

}  // namespace medretrieve::bindings
