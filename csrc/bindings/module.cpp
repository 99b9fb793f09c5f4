#include "bindings/bindings.h"

#if defined(MEDRETRIEVE_FUZZING)
#error "MEDRETRIEVE_FUZZING skips index checksums: it is for the fuzz targets only, never for the Python module"
#endif

PYBIND11_MODULE(_core, m) {
  m.doc() = "medretrieve native core: SIMD kernels, int8 HNSW, flat search, fused MMR/RRF";
  medretrieve::bindings::bind_kernels(m);
  medretrieve::bindings::bind_fusion(m);
  medretrieve::bindings::bind_cuda(m);
  medretrieve::bindings::bind_index(m);
  medretrieve::bindings::bind_search_mmr(m);
}
