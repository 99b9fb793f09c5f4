// The CUDA back end as its callers (the bindings) see it: whole operations
// on core types, with the packing the kernels need done here, not by the
// caller. Plain C++, compiled whether or not CUDA is: without the back end,
// usable() says why and every operation throws std::runtime_error
// "CUDA is not available: <why>".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/metric.h"
#include "cuda/cuda_api.h"
#include "fusion/mmr.h"
#include "fusion/mmr_batch.h"
#include "fusion/rrf.h"

namespace medretrieve::cuda {

// Whether the kernels can run here; otherwise false and, when `why` is
// given, the reason (built without CUDA, no driver, no device...). Never throws.
bool usable(std::string* why = nullptr);
// Throws std::runtime_error "CUDA is not available: <why>" unless usable().
void require_usable();
// cuda::device_summary() once require_usable() passed.
std::string usable_device_summary();

// fusion::mmr_batch on the GPU: the problems (checked by the caller, as for
// the CPU batch) are packed into one device batch (fusion::pack_mmr_batch:
// every problem must share dtype and dim, else std::invalid_argument), run
// with one thread block per problem, and unpacked to one result per problem,
// identical to fusion::mmr_solve's. An empty batch returns no results.
std::vector<fusion::MmrResult> mmr_batch(const std::vector<fusion::MmrProblem>& problems, size_t k, Metric metric,
                                         Timing* timing = nullptr);

// fusion::rrf on the GPU: the lists are laid end to end for the kernel.
// Same rule, ties, float64 sums and argument checks as fusion::rrf.
fusion::Fused rrf_lists(const std::vector<fusion::IdList>& lists, double k, const double* weights, size_t top_n,
                        Timing* timing = nullptr);

}  // namespace medretrieve::cuda
