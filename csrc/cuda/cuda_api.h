// Host-side API of the optional CUDA back end (csrc/cuda/*.cu).
//
// Plain C++ (no CUDA headers) so the pybind11 module can include it. Every
// function throws std::runtime_error with the CUDA error text on failure and
// never aborts; available() never throws. The results match the CPU path:
// same ids (same tie-breaking) and scores within float rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/metric.h"

namespace medretrieve::cuda {

// True when a CUDA device can run the kernels; otherwise false and, when
// `reason` is given, why (no driver, no device, ...). Checked once.
bool available(std::string* reason = nullptr);
// "NVIDIA H200, 132 SMs, 139.8 GiB, sm_90" style summary (throws if unavailable).
std::string device_summary();

// Kernel-only timing with CUDA events: when repeats > 0 the kernels run
// `warmup` + `repeats` more times on device-resident data after the real run
// and times_ms receives one entry per repeat (milliseconds).
struct Timing {
  int warmup = 0;
  int repeats = 0;
  std::vector<float> times_ms;
};

// Similarities, higher is better (common/metric.h): Metric::IP = a.b,
// Metric::L2 = -||a - b||^2. Exact search takes these two (Cosine throws
// std::invalid_argument: normalise the rows and use IP); MMR takes all three.
using medretrieve::Metric;

// Rows a search may return: bit row % 64 of word row / 64 (host memory,
// index::AllowedRows::words' layout); rows past the words are not allowed,
// so a filter with no words allows none. No filter (null) allows every row.
struct RowFilter {
  const uint64_t* words = nullptr;
  size_t n_words = 0;
};

// Exact top-k per query over a row-major database, selected inside the score
// tiles (tile_select.h; no score matrix in device memory). ids/scores: nq * k,
// best first (ties: smaller row id first); past what can be returned (k > n,
// or fewer rows allowed) id -1, score -inf. NaN and -inf scores are never
// returned, as on the CPU path. k <= kMaxTopK.
constexpr size_t kMaxTopK = 1024;
void exact_search_f32(const float* queries, size_t nq, const float* db, size_t n, size_t dim, size_t k,
                      Metric metric, int64_t* ids, float* scores, Timing* timing = nullptr,
                      const RowFilter* filter = nullptr);
// int8 codes standing for x = scale * code (scale arrays may be null: 1).
// Dot products accumulate exactly in int32 on tensor cores (dim <= 131072).
void exact_search_i8(const int8_t* queries, const float* qscale, size_t nq, const int8_t* db, const float* dbscale,
                     size_t n, size_t dim, size_t k, Metric metric, int64_t* ids, float* scores,
                     Timing* timing = nullptr, const RowFilter* filter = nullptr);

// A database kept on the device between searches (FlatIndex(device="cuda")):
// the same kernels as exact_search_*, without re-uploading the rows. Row
// positions are returned (the caller maps them to its ids).
class DeviceTable {
 public:
  DeviceTable();
  ~DeviceTable();
  DeviceTable(const DeviceTable&) = delete;
  DeviceTable& operator=(const DeviceTable&) = delete;
  // Replaces the contents (scales may be null: 1). Squared code norms for
  // NegL2 are computed once here.
  void assign_f32(const float* rows, size_t n, size_t dim);
  void assign_i8(const int8_t* codes, const float* scales, size_t n, size_t dim);
  void search_f32(const float* queries, size_t nq, size_t k, Metric metric, int64_t* ids, float* scores,
                  Timing* timing = nullptr, const RowFilter* filter = nullptr) const;
  void search_i8(const int8_t* queries, const float* qscale, size_t nq, size_t k, Metric metric, int64_t* ids,
                 float* scores, Timing* timing = nullptr, const RowFilter* filter = nullptr) const;
  size_t rows() const;
  size_t dim() const;
  bool is_int8() const;
  size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Batched MMR, one thread block per problem. Problem b owns candidate rows
// [offsets[b], offsets[b+1]) of `rows` and their relevance; it selects
// min(k, size_b) of them with lambdas[b]. order/scores: batch * k, positions
// within the problem, padded with -1 / NaN. Same rule and ties as
// fusion::mmr_select_*.
void mmr_f32(const float* rows, const int64_t* offsets, size_t batch, size_t dim, const float* relevance,
             const float* lambdas, size_t k, Metric metric, int64_t* order, float* scores,
             Timing* timing = nullptr);
// int8: sim(i, j) = base + offset[i] + offset[j] + weight * scale[i] * scale[j] * dot(i, j)
// (scale / offset may be null).
void mmr_i8(const int8_t* rows, const float* scale, const float* offset, float base, float weight,
            const int64_t* offsets, size_t batch, size_t dim, const float* relevance, const float* lambdas,
            size_t k, int64_t* order, float* scores, Timing* timing = nullptr);

// RRF of the lists ids[list_offsets[l], list_offsets[l+1]); same rule, ties
// and float64 sums as fusion::rrf. weights may be null; top_n = 0 keeps all.
void rrf(const int64_t* ids, const int64_t* list_offsets, size_t n_lists, double k, const double* weights,
         size_t top_n, std::vector<int64_t>& out_ids, std::vector<float>& out_scores, Timing* timing = nullptr);

}  // namespace medretrieve::cuda
