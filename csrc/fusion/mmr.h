// Maximal marginal relevance (MMR): greedy, diversity-aware re-selection.
//
//   MMR(d) = lambda * rel(d) - (1 - lambda) * max_{j in selected} sim(d, d_j)
//
// Every remaining candidate keeps its running max-similarity to the picks;
// after each pick ONE kernel call per remaining candidate (against the new
// pick) updates it, so the cost is O(k * n * dim) and no n x n matrix is ever
// built. Rows are passed as ROW POINTERS so an index can hand its storage in
// without copying.
//
// Selection rule (deterministic): the largest MMR value wins; exact ties go to
// the higher relevance, then to the lowest candidate position. The max over an
// empty selected set counts as 0, so the first pick is the most relevant
// candidate (for every lambda) and its reported score is lambda * rel.
// Scores reported are the MMR values at selection time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/metric.h"

namespace medretrieve::fusion {

struct MmrResult {
  std::vector<int64_t> order;  // positions into the candidate list, in pick order
  std::vector<float> scores;   // MMR value of each pick when it was picked
};

// The similarity is the core's one Metric (common/metric.h): IP sim = a.b,
// L2 sim = -||a - b||^2, Cosine a.b / (|a| |b|) (a zero vector has cosine 0
// with everything).
using medretrieve::Metric;

// Float rows. relevance[i] = rel(candidate i). k > n selects n.
// lambda in [0, 1] and finite relevance are the caller's to check (debug
// asserts); throws std::invalid_argument on a non-finite similarity between
// candidates (NaN or inf in the rows).
MmrResult mmr_select_f32(const float* const* rows, size_t n, size_t dim, const float* relevance,
                         size_t k, float lambda, Metric sim);

// int8 rows. Pair similarity
//   sim(i, j) = base + offset[i] + offset[j] + weight * scale[i] * scale[j] * dot_i8(row_i, row_j)
// which covers centred int8 codes x ~= c + s * code:
//   inner product -> base = c.c, offset[i] = c.r_i, weight = 1
//   negative L2   -> base = 0,  offset[i] = -||r_i||^2, weight = 2
// scale == nullptr means 1 for every row, offset == nullptr means 0.
MmrResult mmr_select_i8(const int8_t* const* rows, const float* scale, const float* offset, float base,
                        float weight, size_t n, size_t dim, const float* relevance, size_t k, float lambda);

// Relevance of every candidate to a float query, rel[i] = sim(query, row_i),
// with the same similarity MMR uses between candidates.
void relevance_f32(const float* query, const float* const* rows, size_t n, size_t dim, Metric sim,
                   float* out);
// The same for int8 rows that stand for x_i = scale[i] * code_i (scale may be
// null: 1 for every row). Each row is widened to float once and then goes
// through the SIMD float kernels.
void relevance_i8(const float* query, const int8_t* const* rows, const float* scale, size_t n, size_t dim,
                  Metric sim, float* out);

}  // namespace medretrieve::fusion
