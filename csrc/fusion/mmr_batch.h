// MMR over caller-owned candidate matrices, one problem or a batch of
// independent problems on the core's thread pool (common/parallel.h), plus
// the packing that hands a batch to an accelerator (cuda::mmr_*).
//
// A problem is a candidate matrix (float32 rows, or int8 rows standing for
// scales[i] * row_i), the query or the relevance vector that ranks it, and
// its lambda. Relevance, when not given, is sim(query, row) under the
// metric; between int8 candidates the metric is evaluated from the codes
// (no dequantization, see i8_pair_form).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/metric.h"
#include "fusion/mmr.h"

namespace medretrieve::fusion {

struct MmrProblem {
  bool int8 = false;
  const float* f32 = nullptr;        // n x dim, row-major (float32 candidates)
  const int8_t* i8 = nullptr;        // n x dim, row-major (int8 candidates)
  size_t n = 0, dim = 0;
  const float* scales = nullptr;     // int8 only: n scales >= 0, or null (all 1)
  const float* query = nullptr;      // dim floats, or null
  const float* relevance = nullptr;  // n floats, or null (then query is set)
  float lambda = 0.5f;
};

// Throws std::invalid_argument, prefixed with `what` ("" or "query 3: "),
// on NaN / inf in the query, relevance or scales, a negative scale, int8
// rows longer than kernels::kMaxInt8Dim, or neither query nor relevance.
void check_problem(const MmrProblem& p, const std::string& what);

// The relevance vector: p.relevance, or sim(query, row_i) computed into buf.
const float* problem_relevance(const MmrProblem& p, Metric metric, std::vector<float>& buf);

// The metric between int8 candidates in mmr_select_i8's pair form (base 0):
//   ip: s_i s_j c_i.c_j; l2: -s_i^2|c_i|^2 - s_j^2|c_j|^2 + 2 s_i s_j c_i.c_j;
//   cosine: c_i.c_j / (|c_i| |c_j|).
// Fills scale (n) and offset (n, or left empty when all 0); returns the weight.
float i8_pair_form(const MmrProblem& p, Metric metric, std::vector<float>& scale, std::vector<float>& offset);

// k picks (k > n picks n) of one checked problem.
MmrResult mmr_solve(const MmrProblem& p, size_t k, Metric metric);

// mmr_solve for every problem on up to `threads` threads (<= 0: all cores).
std::vector<MmrResult> mmr_batch(const std::vector<MmrProblem>& problems, size_t k, Metric metric, long long threads);

// A batch laid out for cuda::mmr_f32 / cuda::mmr_i8: problem b owns rows
// [offsets[b], offsets[b+1]). k is clamped to the largest problem.
struct PackedMmrBatch {
  bool int8 = false;
  size_t dim = 0, k = 0;
  std::vector<int64_t> offsets;
  std::vector<float> rows_f32;
  std::vector<int8_t> rows_i8;
  std::vector<float> relevance, lambdas;
  std::vector<float> scale, offset;  // int8 pair form (offset all 0 for ip / cosine)
  float weight = 1.f;
};
// Throws std::invalid_argument when the problems differ in dtype or dim.
PackedMmrBatch pack_mmr_batch(const std::vector<MmrProblem>& problems, size_t k, Metric metric);
// Per-problem results from the packed outputs (batch x packed.k, padded).
std::vector<MmrResult> unpack_mmr_batch(const std::vector<MmrProblem>& problems, const PackedMmrBatch& packed,
                                        const int64_t* order, const float* scores);

}  // namespace medretrieve::fusion
