// Exact top-k search on the GPU: a tiled score kernel (float32 FMA, or int8
// on tensor cores through WMMA with exact int32 sums) fills a queries x
// database score block, then one thread block per query selects its top k
// by a 4-pass radix select on order-preserving float keys, gathers the
// winners (ties at the threshold resolved by the smallest row ids, in an
// ordered block scan) and bitonic-sorts them by (score desc, id asc) -- the
// same order as the CPU path.
#include <mma.h>

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda/common.cuh"

namespace medretrieve::cuda {

using detail::DeviceBuffer;

namespace {

using namespace nvcuda;

// ---- float32 scores: 64 x 64 tile, 256 threads, 4 x 4 outputs each -------
constexpr int kFTile = 64, kFK = 16;

template <bool kL2>
__global__ void __launch_bounds__(256)
    scores_f32_kernel(const float* __restrict__ Q, int nq, const float* __restrict__ X, int64_t n, int dim,
                      float* __restrict__ out, int64_t ld_out) {
  __shared__ float As[kFK][kFTile + 1];
  __shared__ float Bs[kFK][kFTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = blockIdx.y * kFTile;
  const int64_t n0 = int64_t(blockIdx.x) * kFTile;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < dim; k0 += kFK) {
    for (int e = threadIdx.x; e < kFTile * kFK; e += blockDim.x) {
      const int r = e / kFK, c = e % kFK, kk = k0 + c;
      As[c][r] = (q0 + r < nq && kk < dim) ? Q[size_t(q0 + r) * dim + kk] : 0.f;
      Bs[c][r] = (n0 + r < n && kk < dim) ? X[size_t(n0 + r) * dim + kk] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kFK; ++c) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[c][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[c][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (kL2) {
            const float d = a[i] - b[j];
            acc[i][j] = fmaf(d, d, acc[i][j]);
          } else {
            acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
          }
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = q0 + ty + 16 * i;
      const int64_t row = n0 + tx + 16 * j;
      if (q < nq && row < n) out[size_t(q) * ld_out + row] = kL2 ? -acc[i][j] : acc[i][j];
    }
}

// ---- int8 scores on tensor cores: 32 queries x 128 rows per block ---------
// Tiles are staged in shared memory as 16 x 16 byte blocks so every WMMA
// fragment starts 256-byte aligned with ldm = 16, whatever dim is; rows past
// the end and bytes past dim are zero, so they add nothing to the sums.
constexpr int kIBM = 32, kIBN = 128, kIKT = 64, kIKS = kIKT / 16;

template <bool kVec16>
__global__ void __launch_bounds__(256)
    scores_i8_kernel(const int8_t* __restrict__ Q, const float* __restrict__ qscale, const float* __restrict__ qnorm2,
                     int nq, const int8_t* __restrict__ X, const float* __restrict__ xscale,
                     const float* __restrict__ xnorm2, int64_t n, int dim, bool l2, float* __restrict__ out,
                     int64_t ld_out) {
  __shared__ __align__(256) int8_t As[kIKS][kIBM][16];
  __shared__ __align__(256) int8_t Bs[kIKS][kIBN][16];
  __shared__ __align__(256) int Cs[8][2][16][16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.y * kIBM;
  const int64_t n0 = int64_t(blockIdx.x) * kIBN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc[2];
  wmma::fill_fragment(acc[0], 0);
  wmma::fill_fragment(acc[1], 0);
  for (int k0 = 0; k0 < dim; k0 += kIKT) {
    if (kVec16) {  // dim % 16 == 0: one 16-byte load per (row, slice)
      for (int v = threadIdx.x; v < (kIBM + kIBN) * kIKS; v += blockDim.x) {
        const bool is_a = v < kIBM * kIKS;
        const int w = is_a ? v : v - kIBM * kIKS;
        const int r = w / kIKS, ks = w % kIKS, kk = k0 + ks * 16;
        int4 val = make_int4(0, 0, 0, 0);
        if (is_a) {
          if (q0 + r < nq && kk < dim) val = *reinterpret_cast<const int4*>(Q + size_t(q0 + r) * dim + kk);
          *reinterpret_cast<int4*>(&As[ks][r][0]) = val;
        } else {
          if (n0 + r < n && kk < dim) val = *reinterpret_cast<const int4*>(X + size_t(n0 + r) * dim + kk);
          *reinterpret_cast<int4*>(&Bs[ks][r][0]) = val;
        }
      }
    } else {
      for (int e = threadIdx.x; e < (kIBM + kIBN) * kIKT; e += blockDim.x) {
        const bool is_a = e < kIBM * kIKT;
        const int w = is_a ? e : e - kIBM * kIKT;
        const int r = w / kIKT, kb = w % kIKT, kk = k0 + kb;
        if (is_a)
          As[kb / 16][r][kb % 16] = (q0 + r < nq && kk < dim) ? Q[size_t(q0 + r) * dim + kk] : int8_t(0);
        else
          Bs[kb / 16][r][kb % 16] = (n0 + r < n && kk < dim) ? X[size_t(n0 + r) * dim + kk] : int8_t(0);
      }
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kIKS; ++ks) {
      if (k0 + ks * 16 >= dim) break;  // uniform: the rest of the slices are zero
      wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> bf;
      wmma::load_matrix_sync(bf, reinterpret_cast<const signed char*>(&Bs[ks][warp * 16][0]), 16);
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> af;
        wmma::load_matrix_sync(af, reinterpret_cast<const signed char*>(&As[ks][f * 16][0]), 16);
        wmma::mma_sync(acc[f], af, bf, acc[f]);
      }
    }
    __syncthreads();
  }
  wmma::store_matrix_sync(&Cs[warp][0][0][0], acc[0], 16, wmma::mem_row_major);
  wmma::store_matrix_sync(&Cs[warp][1][0][0], acc[1], 16, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 512; e += 32) {
    const int f = e / 256, rr = (e % 256) / 16, cc = e % 16;
    const int q = q0 + f * 16 + rr;
    const int64_t row = n0 + warp * 16 + cc;
    if (q < nq && row < n) {
      const float qs = qscale ? qscale[q] : 1.f, xs = xscale ? xscale[row] : 1.f;
      float s = qs * xs * float(Cs[warp][f][rr][cc]);
      // -||qs q - xs x||^2 = 2 qs xs q.x - qs^2 |q|^2 - xs^2 |x|^2
      if (l2) s = 2.f * s - qs * qs * qnorm2[q] - xs * xs * xnorm2[row];
      out[size_t(q) * ld_out + row] = s;
    }
  }
}

// |code|^2 per row (exact int32, then float), one warp per row.
__global__ void norm2_i8_kernel(const int8_t* __restrict__ X, int64_t n, int dim, float* __restrict__ out) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  int acc = 0;
  for (int d = lane; d < dim; d += 32) {
    const int v = X[size_t(row) * dim + d];
    acc += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[row] = float(acc);
}

// ---- per-query top-k ------------------------------------------------------
constexpr int kSelThreads = 512;

// Order-preserving map of floats onto uint32 (-0 folded onto +0 so that, as
// on the CPU, they tie and the smaller row id wins).
__device__ __forceinline__ uint32_t ordered_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.f ? 0.f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// (key desc, row asc) as one 64-bit number sorted descending; 0 = padding.
__device__ __forceinline__ unsigned long long pack(uint32_t key, int64_t row) {
  return (static_cast<unsigned long long>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(row));
}

__global__ void __launch_bounds__(kSelThreads)
    select_topk_kernel(const float* __restrict__ scores, int64_t ld, int64_t n, int k, int q_base,
                       int64_t* __restrict__ out_ids, float* __restrict__ out_scores) {
  using BlockScan = cub::BlockScan<int, kSelThreads>;
  __shared__ typename BlockScan::TempStorage scan_tmp;
  __shared__ unsigned hist[256];
  __shared__ unsigned long long cand[kMaxTopK];
  __shared__ uint32_t s_prefix, s_mask;
  __shared__ int s_rem, s_count;
  const float* s = scores + size_t(blockIdx.x) * ld;
  const int q = q_base + blockIdx.x;
  const int tid = threadIdx.x;
  const int take = int(n < k ? n : k);
  if (tid == 0) {
    s_prefix = 0;
    s_mask = 0;
    s_rem = take;
    s_count = 0;
  }
  __syncthreads();
  if (n > k) {
    // Radix select: after the 4 passes s_prefix is the key of the k-th
    // largest score and s_rem how many scores equal to it are taken.
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix, mask = s_mask;
      for (int64_t i = tid; i < n; i += blockDim.x) {
        const uint32_t key = ordered_key(s[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        const unsigned rem = unsigned(s_rem);
        unsigned cum = 0;
        for (int b = 255; b >= 0; --b) {
          if (cum + hist[b] >= rem) {
            s_prefix = prefix | (uint32_t(b) << shift);
            s_mask = mask | (255u << shift);
            s_rem = int(rem - cum);
            break;
          }
          cum += hist[b];
        }
      }
      __syncthreads();
    }
    const uint32_t thr = s_prefix;
    const int need_eq = s_rem, greater = take - need_eq;
    for (int64_t i = tid; i < n; i += blockDim.x) {
      const uint32_t key = ordered_key(s[i]);
      if (key > thr) cand[atomicAdd(&s_count, 1)] = pack(key, i);
    }
    // Scores equal to the threshold: the smallest row ids, in row order.
    int base = 0;
    for (int64_t start = 0; start < n && base < need_eq; start += blockDim.x) {
      const int64_t i = start + tid;
      const int flag = (i < n && ordered_key(s[i]) == thr) ? 1 : 0;
      int pos, total;
      BlockScan(scan_tmp).ExclusiveSum(flag, pos, total);
      if (flag && base + pos < need_eq) cand[greater + base + pos] = pack(thr, i);
      base += total;
      __syncthreads();
    }
  } else {
    for (int64_t i = tid; i < n; i += blockDim.x) cand[i] = pack(ordered_key(s[i]), i);
  }
  int P = 1;
  while (P < take) P <<= 1;
  for (int i = take + tid; i < P; i += blockDim.x) cand[i] = 0ull;
  __syncthreads();
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < P; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const unsigned long long a = cand[i], b = cand[j];
          const bool desc = (i & size) == 0;
          if (desc ? (a < b) : (a > b)) {
            cand[i] = b;
            cand[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int r = tid; r < k; r += blockDim.x) {
    const size_t o = size_t(q) * k + r;
    if (r < take) {
      const uint32_t row = ~static_cast<uint32_t>(cand[r] & 0xffffffffull);
      out_ids[o] = int64_t(row);
      out_scores[o] = s[row];
    } else {
      out_ids[o] = -1;
      out_scores[o] = -INFINITY;
    }
  }
}

void check_search_args(size_t nq, size_t n, size_t dim, size_t k, Metric metric, const void* q, const void* db,
                       int64_t* ids, float* scores) {
  if (metric == Metric::Cosine)
    throw std::invalid_argument("cuda exact search: metric must be 'ip' or 'l2' (normalise the rows for cosine)");
  if (k == 0 || k > kMaxTopK)
    throw std::invalid_argument("cuda exact search: k must be in [1, " + std::to_string(kMaxTopK) + "]");
  if (dim == 0 || dim > (size_t(1) << 17)) throw std::invalid_argument("cuda exact search: dim must be in [1, 131072]");
  if (n >= (size_t(1) << 31) || nq >= (size_t(1) << 31))
    throw std::invalid_argument("cuda exact search: at most 2^31 - 1 rows and queries");
  if ((nq && !q) || (n && !db) || (nq && (!ids || !scores)))
    throw std::invalid_argument("cuda exact search: null pointer");
}

// Queries per score block: the block (queries x n floats) stays under 1 GiB.
size_t query_chunk(size_t nq, size_t n) {
  const size_t budget = size_t(1) << 30;
  size_t c = std::max<size_t>(1, budget / (sizeof(float) * std::max<size_t>(n, 1)));
  if (c >= kIBM) c -= c % kIBM;
  return std::min(nq, c);
}

template <class ScoreLaunch>
void search_common(size_t nq, size_t n, size_t k, int64_t* ids, float* scores, Timing* timing,
                   ScoreLaunch&& score_chunk) {
  if (nq == 0) return;
  if (n == 0) {
    std::fill(ids, ids + nq * k, int64_t(-1));
    std::fill(scores, scores + nq * k, -std::numeric_limits<float>::infinity());
    return;
  }
  const size_t chunk = query_chunk(nq, n);
  DeviceBuffer<float> block(chunk * n);
  DeviceBuffer<int64_t> d_ids(nq * k);
  DeviceBuffer<float> d_scores(nq * k);
  auto launch_all = [&] {
    for (size_t q0 = 0; q0 < nq; q0 += chunk) {
      const size_t qc = std::min(chunk, nq - q0);
      score_chunk(q0, qc, block.get());
      select_topk_kernel<<<unsigned(qc), kSelThreads>>>(block.get(), int64_t(n), int64_t(n), int(k), int(q0),
                                                       d_ids.get(), d_scores.get());
      MR_CUDA_LAUNCHED("select_topk_kernel");
    }
  };
  launch_all();
  MR_CUDA_CHECK(cudaDeviceSynchronize());
  d_ids.download(ids, nq * k);
  d_scores.download(scores, nq * k);
  detail::time_kernels(timing, launch_all);
}

// Scores against a device-resident database, then top-k (queries uploaded here).
void search_f32_resident(const float* queries, size_t nq, const float* d_x, size_t n, size_t dim, size_t k,
                         Metric metric, int64_t* ids, float* scores, Timing* timing) {
  DeviceBuffer<float> d_q;
  d_q.upload(queries, nq * dim);
  search_common(nq, n, k, ids, scores, timing, [&](size_t q0, size_t qc, float* out) {
    dim3 grid(detail::blocks_for(n, kFTile), detail::blocks_for(qc, kFTile));
    if (metric == Metric::L2)
      scores_f32_kernel<true><<<grid, 256>>>(d_q.get() + q0 * dim, int(qc), d_x, int64_t(n), int(dim), out,
                                             int64_t(n));
    else
      scores_f32_kernel<false><<<grid, 256>>>(d_q.get() + q0 * dim, int(qc), d_x, int64_t(n), int(dim), out,
                                              int64_t(n));
    MR_CUDA_LAUNCHED("scores_f32_kernel");
  });
}

void norms_i8(const int8_t* d_rows, size_t n, size_t dim, DeviceBuffer<float>& out) {
  out.resize(n);
  if (!n) return;
  norm2_i8_kernel<<<detail::blocks_for(n * 32, 256), 256>>>(d_rows, int64_t(n), int(dim), out.get());
  MR_CUDA_LAUNCHED("norm2_i8_kernel");
}

// d_xs may be null (scales 1); d_xn is needed for NegL2 only.
void search_i8_resident(const int8_t* queries, const float* qscale, size_t nq, const int8_t* d_x, const float* d_xs,
                        const float* d_xn, size_t n, size_t dim, size_t k, Metric metric, int64_t* ids, float* scores,
                        Timing* timing) {
  DeviceBuffer<int8_t> d_q;
  DeviceBuffer<float> d_qs, d_qn;
  d_q.upload(queries, nq * dim);
  if (qscale) d_qs.upload(qscale, nq);
  const bool l2 = metric == Metric::L2;
  if (l2) norms_i8(d_q.get(), nq, dim, d_qn);
  const bool vec16 = dim % 16 == 0;  // cudaMalloc bases are 256-byte aligned
  search_common(nq, n, k, ids, scores, timing, [&](size_t q0, size_t qc, float* out) {
    dim3 grid(detail::blocks_for(n, kIBN), detail::blocks_for(qc, kIBM));
    const float* qs = qscale ? d_qs.get() + q0 : nullptr;
    const float* qn = l2 ? d_qn.get() + q0 : nullptr;
    if (vec16)
      scores_i8_kernel<true><<<grid, 256>>>(d_q.get() + q0 * dim, qs, qn, int(qc), d_x, d_xs, d_xn, int64_t(n),
                                            int(dim), l2, out, int64_t(n));
    else
      scores_i8_kernel<false><<<grid, 256>>>(d_q.get() + q0 * dim, qs, qn, int(qc), d_x, d_xs, d_xn, int64_t(n),
                                             int(dim), l2, out, int64_t(n));
    MR_CUDA_LAUNCHED("scores_i8_kernel");
  });
}

}  // namespace

void exact_search_f32(const float* queries, size_t nq, const float* db, size_t n, size_t dim, size_t k,
                      Metric metric, int64_t* ids, float* scores, Timing* timing) {
  detail::require_device();
  check_search_args(nq, n, dim, k, metric, queries, db, ids, scores);
  DeviceBuffer<float> d_x;
  d_x.upload(db, n * dim);
  search_f32_resident(queries, nq, d_x.get(), n, dim, k, metric, ids, scores, timing);
}

void exact_search_i8(const int8_t* queries, const float* qscale, size_t nq, const int8_t* db, const float* dbscale,
                     size_t n, size_t dim, size_t k, Metric metric, int64_t* ids, float* scores, Timing* timing) {
  detail::require_device();
  check_search_args(nq, n, dim, k, metric, queries, db, ids, scores);
  DeviceBuffer<int8_t> d_x;
  DeviceBuffer<float> d_xs, d_xn;
  d_x.upload(db, n * dim);
  if (dbscale) d_xs.upload(dbscale, n);
  if (metric == Metric::L2) norms_i8(d_x.get(), n, dim, d_xn);
  search_i8_resident(queries, qscale, nq, d_x.get(), dbscale ? d_xs.get() : nullptr, d_xn.get(), n, dim, k, metric,
                     ids, scores, timing);
}

// ---- DeviceTable ----------------------------------------------------------
struct DeviceTable::Impl {
  bool int8 = false;
  size_t n = 0, dim = 0;
  bool has_scales = false;
  DeviceBuffer<float> rows_f32, scales, norms;
  DeviceBuffer<int8_t> rows_i8;
};

DeviceTable::DeviceTable() : impl_(new Impl) { detail::require_device(); }
DeviceTable::~DeviceTable() = default;

void DeviceTable::assign_f32(const float* rows, size_t n, size_t dim) {
  if (dim == 0 || dim > (size_t(1) << 17)) throw std::invalid_argument("cuda table: dim must be in [1, 131072]");
  if (n && !rows) throw std::invalid_argument("cuda table: null rows");
  auto next = std::make_unique<Impl>();
  next->n = n;
  next->dim = dim;
  next->rows_f32.upload(rows, n * dim);
  impl_ = std::move(next);  // the old table stays valid until the new one is complete
}

void DeviceTable::assign_i8(const int8_t* codes, const float* scales, size_t n, size_t dim) {
  if (dim == 0 || dim > (size_t(1) << 17)) throw std::invalid_argument("cuda table: dim must be in [1, 131072]");
  if (n && !codes) throw std::invalid_argument("cuda table: null codes");
  auto next = std::make_unique<Impl>();
  next->int8 = true;
  next->n = n;
  next->dim = dim;
  next->rows_i8.upload(codes, n * dim);
  next->has_scales = scales != nullptr;
  if (scales) next->scales.upload(scales, n);
  norms_i8(next->rows_i8.get(), n, dim, next->norms);
  MR_CUDA_CHECK(cudaDeviceSynchronize());
  impl_ = std::move(next);
}

void DeviceTable::search_f32(const float* queries, size_t nq, size_t k, Metric metric, int64_t* ids, float* scores,
                             Timing* timing) const {
  if (impl_->int8) throw std::invalid_argument("cuda table holds int8 rows: use search_i8");
  check_search_args(nq, impl_->n, impl_->dim, k, metric, queries, impl_->rows_f32.get(), ids, scores);
  search_f32_resident(queries, nq, impl_->rows_f32.get(), impl_->n, impl_->dim, k, metric, ids, scores, timing);
}

void DeviceTable::search_i8(const int8_t* queries, const float* qscale, size_t nq, size_t k, Metric metric,
                            int64_t* ids, float* scores, Timing* timing) const {
  if (!impl_->int8) throw std::invalid_argument("cuda table holds float32 rows: use search_f32");
  check_search_args(nq, impl_->n, impl_->dim, k, metric, queries, impl_->rows_i8.get(), ids, scores);
  search_i8_resident(queries, qscale, nq, impl_->rows_i8.get(), impl_->has_scales ? impl_->scales.get() : nullptr,
                     impl_->norms.get(), impl_->n, impl_->dim, k, metric, ids, scores, timing);
}

size_t DeviceTable::rows() const { return impl_->n; }
size_t DeviceTable::dim() const { return impl_->dim; }
bool DeviceTable::is_int8() const { return impl_->int8; }
size_t DeviceTable::device_bytes() const {
  const Impl& t = *impl_;
  return t.rows_f32.size() * sizeof(float) + t.rows_i8.size() + (t.scales.size() + t.norms.size()) * sizeof(float);
}

}  // namespace medretrieve::cuda
