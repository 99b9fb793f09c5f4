// Reciprocal rank fusion (RRF) and normalised score fusion of ranked id lists.
//
// RRF:   score(id) = sum_l w_l / (k + rank_l(id)),  rank_l starting at 1.
// Ranks are positions in each list as given; an id repeated inside one list
// counts once, at its first (best) position, and does not shift later ids.
// Ids absent from a list get nothing from it. Output order (deterministic):
// higher fused score, then better (smaller) best single rank over all lists,
// then smaller id. Scores are summed in float64 in list order and reported as
// float32.
//
// Score fusion: each list's scores are normalised, then weighted and summed.
//   minmax: (s - min) / (max - min); a list whose scores are all equal maps
//           them to 1. An id missing from a list gets 0 from it.
//   zscore: (s - mean) / std (population std); a constant list maps to 0. An
//           id missing from a list gets that list's minimum normalised value
//           (it ranked below everything the list returned).
// An id repeated inside one list keeps its highest score; statistics use one
// score per id. Output order: higher fused score, then smaller id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace medretrieve::fusion {

struct IdList {
  const int64_t* ids;
  size_t size;
};

struct ScoredList {
  const int64_t* ids;
  const float* scores;
  size_t size;
};

struct Fused {
  std::vector<int64_t> ids;
  std::vector<float> scores;
};

enum class ScoreNorm { MinMax, ZScore };

// weights: one per list or nullptr (all 1); must be finite and >= 0.
// k: finite and >= 0. top_n = 0 keeps every id.
// Throws std::invalid_argument on bad arguments.
Fused rrf(const std::vector<IdList>& lists, double k, const double* weights, size_t top_n);

// Throws std::invalid_argument on bad arguments or non-finite scores.
Fused fuse_scores(const std::vector<ScoredList>& lists, ScoreNorm norm, const double* weights, size_t top_n);

}  // namespace medretrieve::fusion
