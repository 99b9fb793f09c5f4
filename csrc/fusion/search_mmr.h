// Search + MMR in one native call: the HNSW search fetches fetch_k candidates
// and MMR diversifies them reading their vectors straight from the index's
// storage (row pointers into the slabs; nothing is copied to Python).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "index/filter.h"
#include "index/hnsw.h"
#include "index/labels.h"

namespace medretrieve::fusion {

struct SearchMmrResult {
  std::vector<int64_t> ids;       // external ids, in MMR pick order
  std::vector<float> scores;      // MMR value of each pick
  std::vector<float> relevance;   // similarity to the query (native score convention)
};

// k picks out of fetch_k candidates (fetch_k is raised to k, ef to fetch_k).
// allowed: null, or the external ids the candidates may have (a caller's bitset,
// compiled to the index's slots under its lock): the candidates are the same
// filtered search Hnsw::search runs, planner included (graph walk or exact scan
// of the allowed rows), so min(k, allowed live rows) picks, none outside it.
// Pair similarities use the index's space: ip/cosine inner product, l2 the
// negative squared distance; int8 indexes use the centred-code identity
// x.y = c.c + c.r_x + c.r_y + s_x s_y dot_i8 (no dequantization).
SearchMmrResult search_mmr(const index::Hnsw& hnsw, const float* query, size_t k, size_t fetch_k, float lambda,
                           size_t ef, const index::LabelQuery* labels, const index::ExternalBits* allowed = nullptr);

}  // namespace medretrieve::fusion
