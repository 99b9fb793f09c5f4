// Each area of the native core registers its Python bindings here; the
// binding files only convert types, check arguments and release the GIL.
#pragma once

#include <pybind11/pybind11.h>

namespace medretrieve::bindings {
void bind_kernels(pybind11::module_& m);
void bind_fusion(pybind11::module_& m);
void bind_cuda(pybind11::module_& m);
void bind_index(pybind11::module_& m);
void bind_search_mmr(pybind11::module_& m);  // after bind_index: takes HnswIndex
}  // namespace medretrieve::bindings
