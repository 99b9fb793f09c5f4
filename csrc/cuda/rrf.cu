// Reciprocal rank fusion on the GPU: a stable sort by id groups each id's
// occurrences in list order; one thread per id then sums w_l / (k + rank) in
// float64 in that order (skipping repeats inside a list), exactly as the CPU
// does, and a final sort applies the CPU's order (score desc, best rank asc,
// id asc). Bit-identical to fusion::rrf.
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cmath>
#include <vector>

#include "cuda/common.cuh"

namespace medretrieve::cuda {
namespace {

struct Entry {
  int64_t id;
  double score;
  int64_t best_rank;
};

struct EntryBefore {
  __host__ __device__ bool operator()(const Entry& a, const Entry& b) const {
    if (a.score != b.score) return a.score > b.score;
    if (a.best_rank != b.best_rank) return a.best_rank < b.best_rank;
    return a.id < b.id;
  }
};

struct GroupStart {
  const int64_t* keys;
  __host__ __device__ bool operator()(int64_t e) const { return e == 0 || keys[e] != keys[e - 1]; }
};

__global__ void sum_groups_kernel(const int64_t* __restrict__ keys, const int64_t* __restrict__ perm,
                                  const int32_t* __restrict__ list_of, const int64_t* __restrict__ rank,
                                  const double* __restrict__ weights, double k, const int64_t* __restrict__ starts,
                                  int64_t groups, int64_t total, Entry* __restrict__ out) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const int64_t s = starts[g], e = g + 1 < groups ? starts[g + 1] : total;
  double score = 0.0;
  int64_t best = INT64_MAX;
  int32_t prev_list = -1;
  for (int64_t t = s; t < e; ++t) {
    const int64_t o = perm[t];
    const int32_t l = list_of[o];
    if (l == prev_list) continue;  // a repeat inside one list: its first position counts
    prev_list = l;
    const double w = weights ? weights[l] : 1.0;
    score += w / (k + double(rank[o]));
    best = rank[o] < best ? rank[o] : best;
  }
  out[g] = Entry{keys[s], score, best};
}

}  // namespace

void rrf(const int64_t* ids, const int64_t* list_offsets, size_t n_lists, double k, const double* weights,
         size_t top_n, std::vector<int64_t>& out_ids, std::vector<float>& out_scores, Timing* timing) {
  detail::require_device();
  if (!std::isfinite(k) || k < 0) throw std::invalid_argument("rrf: k must be finite and >= 0");
  if (weights)
    for (size_t l = 0; l < n_lists; ++l)
      if (!std::isfinite(weights[l]) || weights[l] < 0) throw std::invalid_argument("rrf: weights must be finite and >= 0");
  out_ids.clear();
  out_scores.clear();
  const size_t total = n_lists ? size_t(list_offsets[n_lists]) : 0;
  if (total == 0) return;
  std::vector<int32_t> list_of(total);
  std::vector<int64_t> rank(total);
  for (size_t l = 0; l < n_lists; ++l)
    for (int64_t e = list_offsets[l]; e < list_offsets[l + 1]; ++e) {
      list_of[size_t(e)] = int32_t(l);
      rank[size_t(e)] = e - list_offsets[l] + 1;
    }
  try {
    thrust::device_vector<int64_t> d_ids(ids, ids + total), keys(total), perm(total), rank_d(rank.begin(), rank.end());
    thrust::device_vector<int32_t> list_d(list_of.begin(), list_of.end());
    thrust::device_vector<double> w_d;
    if (weights) w_d.assign(weights, weights + n_lists);
    thrust::device_vector<int64_t> starts(total);
    thrust::device_vector<Entry> entries(total);
    int64_t groups = 0;
    auto launch = [&] {
      thrust::copy(d_ids.begin(), d_ids.end(), keys.begin());
      thrust::sequence(perm.begin(), perm.end());
      thrust::stable_sort_by_key(keys.begin(), keys.end(), perm.begin());
      auto end = thrust::copy_if(thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(total),
                                 starts.begin(), GroupStart{thrust::raw_pointer_cast(keys.data())});
      groups = end - starts.begin();
      sum_groups_kernel<<<detail::blocks_for(size_t(groups), 256), 256>>>(
          thrust::raw_pointer_cast(keys.data()), thrust::raw_pointer_cast(perm.data()),
          thrust::raw_pointer_cast(list_d.data()), thrust::raw_pointer_cast(rank_d.data()),
          weights ? thrust::raw_pointer_cast(w_d.data()) : nullptr, k, thrust::raw_pointer_cast(starts.data()),
          groups, int64_t(total), thrust::raw_pointer_cast(entries.data()));
      MR_CUDA_LAUNCHED("sum_groups_kernel");
      thrust::sort(entries.begin(), entries.begin() + groups, EntryBefore{});
    };
    launch();
    MR_CUDA_CHECK(cudaDeviceSynchronize());
    const size_t keep = top_n ? std::min(size_t(groups), top_n) : size_t(groups);
    std::vector<Entry> host(keep);
    if (keep) thrust::copy(entries.begin(), entries.begin() + keep, host.begin());
    out_ids.reserve(keep);
    out_scores.reserve(keep);
    for (const Entry& e : host) {
      out_ids.push_back(e.id);
      out_scores.push_back(float(e.score));
    }
    detail::time_kernels(timing, launch);
  } catch (const thrust::system_error& e) {
    throw std::runtime_error(std::string("CUDA error in rrf: ") + e.what());
  }
}

}  // namespace medretrieve::cuda
