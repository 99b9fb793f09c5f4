// Batched MMR on the GPU: one thread block per problem. Each step the block
// reduces (MMR value, relevance, -position) to the pick -- the same rule and
// ties as fusion::mmr_select_* -- then one warp per remaining candidate
// computes its similarity to the pick and folds it into its max-sim
// (assigned on the first pick, max afterwards), i.e. the eager form of the
// CPU's incremental update; both give the same picks.
#include <cmath>
#include <climits>
#include <vector>

#include "cuda/common.cuh"

namespace medretrieve::cuda {

using detail::DeviceBuffer;

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

struct Best {
  float value, rel;
  int pos;
};

__device__ __forceinline__ bool better(const Best& x, const Best& y) {  // x beats y
  if (x.value != y.value) return x.value > y.value;
  if (x.rel != y.rel) return x.rel > y.rel;
  return x.pos < y.pos;
}

__device__ __forceinline__ Best shfl_best(const Best& b, int offset) {
  Best o;
  o.value = __shfl_down_sync(0xffffffffu, b.value, offset);
  o.rel = __shfl_down_sync(0xffffffffu, b.rel, offset);
  o.pos = __shfl_down_sync(0xffffffffu, b.pos, offset);
  return o;
}

// Rows are float32 (kInt8 false: similarity 0 = ip, 1 = -l2^2, 2 = cosine
// with inv_norm) or int8 (kInt8 true: base + off_i + off_j + w s_i s_j dot).
template <bool kInt8>
__global__ void __launch_bounds__(kThreads)
    mmr_kernel(const float* __restrict__ rows_f, const int8_t* __restrict__ rows_i, const float* __restrict__ inv_norm,
               int similarity, const float* __restrict__ scale, const float* __restrict__ offset, float base,
               float weight, const int64_t* __restrict__ offsets, int dim, const float* __restrict__ rel,
               const float* __restrict__ lambdas, int k, float* __restrict__ max_sim, unsigned char* __restrict__ taken,
               int64_t* __restrict__ order, float* __restrict__ out_scores, int* __restrict__ error) {
  __shared__ Best warp_best[kWarps];
  __shared__ Best pick;
  const int b = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t begin = offsets[b];
  const int n = int(offsets[b + 1] - begin);
  const int take = n < k ? n : k;
  const float a = lambdas[b], c = 1.f - lambdas[b];
  for (int i = threadIdx.x; i < n; i += kThreads) {
    max_sim[begin + i] = 0.f;  // max over the empty set counts as 0
    taken[begin + i] = 0;
  }
  __syncthreads();
  for (int step = 0; step < take; ++step) {
    Best mine{-INFINITY, -INFINITY, INT_MAX};
    for (int i = threadIdx.x; i < n; i += kThreads) {
      if (taken[begin + i]) continue;
      const Best cand{a * rel[begin + i] - c * max_sim[begin + i], rel[begin + i], i};
      if (better(cand, mine)) mine = cand;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const Best other = shfl_best(mine, o);
      if (better(other, mine)) mine = other;
    }
    if (lane == 0) warp_best[warp] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
      Best best = warp_best[0];
      for (int w = 1; w < kWarps; ++w)
        if (better(warp_best[w], best)) best = warp_best[w];
      pick = best;
      taken[begin + best.pos] = 1;
      order[size_t(b) * k + step] = best.pos;
      out_scores[size_t(b) * k + step] = best.value;
    }
    __syncthreads();
    if (step + 1 == take) break;
    const int p = pick.pos;
    for (int i = warp; i < n; i += kWarps) {
      if (taken[begin + i]) continue;
      float s;
      if (kInt8) {
        const int8_t* x = rows_i + size_t(begin + i) * dim;
        const int8_t* y = rows_i + size_t(begin + p) * dim;
        int acc = 0;
        for (int d = lane; d < dim; d += 32) acc += int(x[d]) * int(y[d]);
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        const float si = scale ? scale[begin + i] : 1.f, sp = scale ? scale[begin + p] : 1.f;
        const float oi = offset ? offset[begin + i] : 0.f, op = offset ? offset[begin + p] : 0.f;
        s = base + oi + op + weight * si * sp * float(acc);
      } else {
        const float* x = rows_f + size_t(begin + i) * dim;
        const float* y = rows_f + size_t(begin + p) * dim;
        float acc = 0.f;
        if (similarity == 1) {
          for (int d = lane; d < dim; d += 32) {
            const float t = x[d] - y[d];
            acc = fmaf(t, t, acc);
          }
        } else {
          for (int d = lane; d < dim; d += 32) acc = fmaf(x[d], y[d], acc);
        }
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        s = similarity == 1 ? -acc : similarity == 2 ? acc * inv_norm[begin + i] * inv_norm[begin + p] : acc;
      }
      if (lane == 0) {
        if (!isfinite(s)) atomicExch(error, 1);
        max_sim[begin + i] = step == 0 ? s : fmaxf(max_sim[begin + i], s);
      }
    }
    __syncthreads();
  }
  for (int t = take + threadIdx.x; t < k; t += kThreads) {
    order[size_t(b) * k + t] = -1;
    out_scores[size_t(b) * k + t] = NAN;
  }
}

// 1 / |row| (0 for a zero row), one warp per row.
__global__ void inv_norm_kernel(const float* __restrict__ rows, int64_t n, int dim, float* __restrict__ out) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  float acc = 0.f;
  for (int d = lane; d < dim; d += 32) acc = fmaf(rows[size_t(row) * dim + d], rows[size_t(row) * dim + d], acc);
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[row] = acc > 0.f ? 1.f / sqrtf(acc) : 0.f;
}

void check_mmr_args(const int64_t* offsets, size_t batch, size_t dim, const float* relevance, const float* lambdas,
                    size_t k) {
  if (batch && (!offsets || !lambdas)) throw std::invalid_argument("cuda mmr: null pointer");
  if (k >= (size_t(1) << 31) || dim >= (size_t(1) << 31)) throw std::invalid_argument("cuda mmr: k or dim too large");
  for (size_t b = 0; b < batch; ++b) {
    if (offsets[b + 1] < offsets[b] || offsets[b + 1] - offsets[b] >= (int64_t(1) << 31))
      throw std::invalid_argument("cuda mmr: bad candidate offsets");
    if (!(lambdas[b] >= 0.f && lambdas[b] <= 1.f)) throw std::invalid_argument("lambda must be in [0, 1]");
  }
  const size_t total = batch ? size_t(offsets[batch]) : 0;
  if (total && !relevance) throw std::invalid_argument("cuda mmr: null relevance");
  for (size_t i = 0; i < total; ++i)
    if (!std::isfinite(relevance[i]))
      throw std::invalid_argument("mmr: relevance of candidate " + std::to_string(i) + " is not finite");
}

template <bool kInt8, class Upload>
void run_mmr(const int64_t* offsets, size_t batch, size_t dim, const float* relevance, const float* lambdas, size_t k,
             int64_t* order, float* scores, Timing* timing, Upload&& launch_with) {
  detail::require_device();
  check_mmr_args(offsets, batch, dim, relevance, lambdas, k);
  if (batch == 0 || k == 0) return;
  const size_t total = size_t(offsets[batch]);
  DeviceBuffer<int64_t> d_off, d_order(batch * k);
  DeviceBuffer<float> d_rel, d_lam, d_max(total ? total : 1), d_scores(batch * k);
  DeviceBuffer<unsigned char> d_taken(total ? total : 1);
  DeviceBuffer<int> d_err(1);
  d_off.upload(offsets, batch + 1);
  d_rel.upload(relevance, total);
  d_lam.upload(lambdas, batch);
  MR_CUDA_CHECK(cudaMemset(d_err.get(), 0, sizeof(int)));
  auto launch = [&] {
    launch_with(d_off.get(), d_rel.get(), d_lam.get(), d_max.get(), d_taken.get(), d_order.get(), d_scores.get(),
                d_err.get());
    MR_CUDA_LAUNCHED("mmr_kernel");
  };
  launch();
  MR_CUDA_CHECK(cudaDeviceSynchronize());
  int err = 0;
  d_err.download(&err, 1);
  if (err) throw std::invalid_argument("mmr: a similarity between candidates is not finite (NaN or inf in the vectors?)");
  d_order.download(order, batch * k);
  d_scores.download(scores, batch * k);
  detail::time_kernels(timing, launch);
}

}  // namespace

void mmr_f32(const float* rows, const int64_t* offsets, size_t batch, size_t dim, const float* relevance,
             const float* lambdas, size_t k, Metric metric, int64_t* order, float* scores, Timing* timing) {
  // The kernel's similarity code: 0 = ip, 1 = -l2^2, 2 = cosine.
  const int similarity = metric == Metric::L2 ? 1 : metric == Metric::Cosine ? 2 : 0;
  DeviceBuffer<float> d_rows, d_inv;
  const size_t total = batch ? size_t(offsets[batch]) : 0;
  run_mmr<false>(offsets, batch, dim, relevance, lambdas, k, order, scores, timing,
                 [&](const int64_t* off, const float* rel, const float* lam, float* mx, unsigned char* tk, int64_t* ord,
                     float* sc, int* err) {
                   if (!d_rows.get() && total) {  // first launch: upload once
                     d_rows.upload(rows, total * dim);
                     if (similarity == 2) {
                       d_inv.resize(total);
                       inv_norm_kernel<<<detail::blocks_for(total * 32, 256), 256>>>(d_rows.get(), int64_t(total),
                                                                                     int(dim), d_inv.get());
                     }
                   }
                   mmr_kernel<false><<<unsigned(batch), kThreads>>>(d_rows.get(), nullptr, d_inv.get(), similarity,
                                                                    nullptr, nullptr, 0.f, 1.f, off, int(dim), rel, lam,
                                                                    int(k), mx, tk, ord, sc, err);
                 });
}

void mmr_i8(const int8_t* rows, const float* scale, const float* offset, float base, float weight,
            const int64_t* offsets, size_t batch, size_t dim, const float* relevance, const float* lambdas, size_t k,
            int64_t* order, float* scores, Timing* timing) {
  DeviceBuffer<int8_t> d_rows;
  DeviceBuffer<float> d_scale, d_offset;
  const size_t total = batch ? size_t(offsets[batch]) : 0;
  run_mmr<true>(offsets, batch, dim, relevance, lambdas, k, order, scores, timing,
                [&](const int64_t* off, const float* rel, const float* lam, float* mx, unsigned char* tk, int64_t* ord,
                    float* sc, int* err) {
                  if (!d_rows.get() && total) {
                    d_rows.upload(rows, total * dim);
                    if (scale) d_scale.upload(scale, total);
                    if (offset) d_offset.upload(offset, total);
                  }
                  mmr_kernel<true><<<unsigned(batch), kThreads>>>(nullptr, d_rows.get(), nullptr, 0,
                                                                  scale ? d_scale.get() : nullptr,
                                                                  offset ? d_offset.get() : nullptr, base, weight, off,
                                                                  int(dim), rel, lam, int(k), mx, tk, ord, sc, err);
                });
}

}  // namespace medretrieve::cuda
