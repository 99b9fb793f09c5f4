// Host side of the CUDA back end (see host.h). Compiled into the core in
// every build; the calls into csrc/cuda/*.cu exist only when CUDA is built.
#include "cuda/host.h"

#include <cstdint>
#include <stdexcept>

namespace medretrieve::cuda {

bool usable(std::string* why) {
#if defined(MEDRETRIEVE_WITH_CUDA)
  return available(why);
#else
  if (why) *why = "medretrieve was built without the CUDA back end (MEDRETRIEVE_CUDA=OFF or nvcc not found)";
  return false;
#endif
}

void require_usable() {
  std::string why;
  if (!usable(&why)) throw std::runtime_error("CUDA is not available: " + why);
}

std::string usable_device_summary() {
  require_usable();
#if defined(MEDRETRIEVE_WITH_CUDA)
  return device_summary();
#else
  return {};  // not reached: require_usable() threw
#endif
}

std::vector<fusion::MmrResult> mmr_batch(const std::vector<fusion::MmrProblem>& problems, size_t k, Metric metric,
                                         Timing* timing) {
  require_usable();
#if defined(MEDRETRIEVE_WITH_CUDA)
  const fusion::PackedMmrBatch p = fusion::pack_mmr_batch(problems, k, metric);
  const size_t batch = problems.size();
  // Outputs are batch x p.k, padded past each problem's own size (unpack trims them).
  std::vector<int64_t> order(batch * p.k, -1);
  std::vector<float> scores(batch * p.k);
  if (batch > 0 && p.k > 0) {
    if (p.int8)
      mmr_i8(p.rows_i8.data(), p.scale.data(), p.offset.data(), 0.f, p.weight, p.offsets.data(), batch, p.dim,
             p.relevance.data(), p.lambdas.data(), p.k, order.data(), scores.data(), timing);
    else
      mmr_f32(p.rows_f32.data(), p.offsets.data(), batch, p.dim, p.relevance.data(), p.lambdas.data(), p.k, metric,
              order.data(), scores.data(), timing);
  }
  return fusion::unpack_mmr_batch(problems, p, order.data(), scores.data());
#else
  return {};  // not reached: require_usable() threw
#endif
}

fusion::Fused rrf_lists(const std::vector<fusion::IdList>& lists, double k, const double* weights, size_t top_n,
                        Timing* timing) {
  require_usable();
  fusion::Fused out;
#if defined(MEDRETRIEVE_WITH_CUDA)
  std::vector<int64_t> flat, offsets(lists.size() + 1, 0);
  for (size_t l = 0; l < lists.size(); ++l) {
    flat.insert(flat.end(), lists[l].ids, lists[l].ids + lists[l].size);
    offsets[l + 1] = int64_t(flat.size());
  }
  rrf(flat.data(), offsets.data(), lists.size(), k, weights, top_n, out.ids, out.scores, timing);
#endif
  return out;
}

}  // namespace medretrieve::cuda
