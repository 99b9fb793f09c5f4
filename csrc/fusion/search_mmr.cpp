#include "fusion/search_mmr.h"

#include <algorithm>
#include <cassert>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>

#include "fusion/mmr.h"

namespace medretrieve::fusion {

SearchMmrResult search_mmr(const index::Hnsw& hnsw, const float* query, size_t k, size_t fetch_k, float lambda,
                           size_t ef, const index::LabelQuery* labels, const index::ExternalBits* allowed) {
  assert(lambda >= 0.f && lambda <= 1.f);  // checked by the caller (the binding reads it)
  index::check_k(k, hnsw.count());
  index::check_k(fetch_k, hnsw.count(), "fetch_k");
  SearchMmrResult out;
  if (k == 0) return out;
  fetch_k = std::max(fetch_k, k);
  ef = std::max(ef ? ef : hnsw.ef(), fetch_k);

  // Rows stay valid while the shared lock keeps resize/load out.
  std::shared_lock<SharedMutex> guard(hnsw.mutex());
  // The slots the filter allows, compiled as Hnsw::search does, under the same lock (slots do not move under it).
  std::optional<index::AllowedRows> rows;
  if (allowed) rows = index::AllowedRows::from_external(hnsw.store(), allowed->words, allowed->n_words);
  const std::vector<index::Candidate> found =
      hnsw.search_internal(query, fetch_k, ef, labels, nullptr, rows ? &*rows : nullptr);
  const size_t n = found.size();
  if (n == 0) return out;

  std::vector<float> relevance(n);
  for (size_t i = 0; i < n; ++i) relevance[i] = -found[i].first;  // distance -> similarity

  const index::Space space = hnsw.space();
  const size_t dim = hnsw.params().dim;
  MmrResult picked;
  if (hnsw.dtype() == index::DType::Int8) {
    std::vector<const int8_t*> rows(n);
    std::vector<float> scale(n), offset(n);
    const bool l2 = space == index::Space::L2;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t id = found[i].second;
      rows[i] = hnsw.row_i8(id);
      scale[i] = hnsw.row_scale(id);
      // aux: ip/cosine c.r (offset as is); l2 ||r||^2 (offset = -aux).
      offset[i] = l2 ? -hnsw.row_aux(id) : hnsw.row_aux(id);
    }
    const float base = l2 ? 0.f : hnsw.store().centre_norm2();
    const float weight = l2 ? 2.f : 1.f;
    picked = mmr_select_i8(rows.data(), scale.data(), offset.data(), base, weight, n, dim, relevance.data(), k,
                           lambda);
  } else {
    std::vector<const float*> rows(n);
    for (size_t i = 0; i < n; ++i) rows[i] = hnsw.row_f32(found[i].second);
    // Cosine rows are stored normalised, so the inner product is the cosine.
    const Metric sim = space == index::Space::L2 ? Metric::L2 : Metric::IP;
    picked = mmr_select_f32(rows.data(), n, dim, relevance.data(), k, lambda, sim);
  }

  out.ids.reserve(picked.order.size());
  for (size_t j = 0; j < picked.order.size(); ++j) {
    const size_t pos = size_t(picked.order[j]);
    out.ids.push_back(int64_t(hnsw.store().ext_id(found[pos].second)));
    out.relevance.push_back(relevance[pos]);
  }
  out.scores = std::move(picked.scores);
  return out;
}

}  // namespace medretrieve::fusion
