// Exact top-k search on the GPU, selecting inside the score tiles: each
// thread block owns a tile of queries and one slice of the database (every
// S-th tile of rows), computes a tile of scores (float32 FMA, or int8 on
// tensor cores through WMMA with exact int32 sums), offers them to each
// query's bounded queue (tile_select.h: a buffer of the scores that beat the
// queue's k-th best, sorted and merged after every tile by the block's
// threads, 256 / queries per tile of them per query), and a last kernel
// merges a query's S queues into its k results, one warp per query. No
// score matrix reaches global memory: the scratch is nq x S x (2k + tile
// rows) candidates. Order:
// score descending, then row ascending -- the CPU path's. The same selection
// runs on the CPU in tiled_topk_twin.h, where the tests check it.
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/tile_select.h"

namespace medretrieve::cuda {

using detail::DeviceBuffer;
using tile_select::Packed;

namespace {

using namespace nvcuda;
namespace ts = tile_select;

// Where the queues live: query q (of the launch), slice s owns the slot at
// slots + (q * n_slices + s) * stride: the queue's two arrays of k (the one
// in current[q * n_slices + s] holds its sizes[...] entries) and the sorted
// buffer (tile rows).
struct Queues {
  Packed* slots;
  int* sizes;
  int* current;
  int n_slices;
  uint64_t stride;  // 2k + the tile's rows
  int k;
  const uint64_t* allowed;  // row bitset on the device, or null
  uint64_t n_words;
};

// Offers one score of a query to its buffer (shared memory): what beats the
// queue's bound joins it, in any order (the flush sorts; packed candidates
// never tie, so the result does not depend on the threads' order).
__device__ __forceinline__ void offer(Packed* buf_row, int* count, Packed bound, const Queues& a, float v,
                                     int64_t row) {
  if (!ts::selectable(v) || !ts::row_allowed(a.allowed, a.n_words, uint32_t(row))) return;
  const Packed p = ts::pack(v, uint32_t(row));
  if (p > bound) buf_row[atomicAdd(count, 1)] = p;
}

// Per-query state of a block's queues, in shared memory.
template <int kQT>
struct QueueState {
  Packed bound[kQT];  // what a score must beat (tile_select::queue_bound)
  int count[kQT];     // entries in the buffer
  int size[kQT];      // entries in the queue
  int cur[kQT];       // which of the slot's two arrays holds the queue
};

// After a tile (all 256 threads, between __syncthreads): the kParts threads
// of each query sort its buffer into the slot, then merge it with the queue
// into the queue's other array (tile_select.h, step 3).
template <int kQT, int kRT>
__device__ __forceinline__ void flush_tile(Packed (*buf)[kRT], QueueState<kQT>& st, int q0, int nq, const Queues& a) {
  constexpr int kParts = 256 / kQT;
  const int g = threadIdx.x / kParts, p = threadIdx.x % kParts;
  const bool active = q0 + g < nq && st.count[g] > 0;
  Packed* slot = active ? a.slots + (uint64_t(q0 + g) * a.n_slices + blockIdx.x) * a.stride : nullptr;
  if (active) ts::rank_sort_part(buf[g], st.count[g], slot + 2 * a.k, p, kParts);
  __syncthreads();
  if (active)
    ts::merge_part(slot + st.cur[g] * a.k, st.size[g], slot + 2 * a.k, st.count[g], a.k, p, kParts,
                   slot + (1 - st.cur[g]) * a.k);
  __syncthreads();
  if (active && p == 0) {
    st.size[g] = ts::merged_size(st.size[g], st.count[g], a.k);
    st.cur[g] ^= 1;
    st.bound[g] = ts::queue_bound(slot + st.cur[g] * a.k, st.size[g], a.k);
    st.count[g] = 0;
  }
}

template <int kQT>
__device__ __forceinline__ void init_queues(QueueState<kQT>& st) {
  for (int t = threadIdx.x; t < kQT; t += blockDim.x) {
    st.bound[t] = 0ull;
    st.count[t] = 0;
    st.size[t] = 0;
    st.cur[t] = 0;
  }
}

template <int kQT>
__device__ __forceinline__ void store_sizes(const QueueState<kQT>& st, int q0, int nq, const Queues& a) {
  for (int t = threadIdx.x; t < kQT; t += blockDim.x)
    if (q0 + t < nq) {
      a.sizes[uint64_t(q0 + t) * a.n_slices + blockIdx.x] = st.size[t];
      a.current[uint64_t(q0 + t) * a.n_slices + blockIdx.x] = st.cur[t];
    }
}

// ---- float32: 64 queries x 64 rows per tile, 256 threads, 4 x 4 each ------
constexpr int kFTile = 64, kFK = 16;

struct F32Stage {
  float A[kFK][kFTile + 1];
  float B[kFK][kFTile + 1];
};
union F32Shared {  // the staging and the buffers are never used at once
  F32Stage stage;
  Packed buf[kFTile][kFTile];
};

template <bool kL2>
__global__ void __launch_bounds__(256)
    fused_f32_kernel(const float* __restrict__ Q, int nq, const float* __restrict__ X, int64_t n, int dim, Queues a) {
  __shared__ F32Shared sh;
  __shared__ QueueState<kFTile> st;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int q0 = blockIdx.y * kFTile;
  const int64_t tiles = (n + kFTile - 1) / kFTile;
  init_queues(st);
  __syncthreads();
  for (int64_t t = blockIdx.x; t < tiles; t += a.n_slices) {
    const int64_t n0 = t * kFTile;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < dim; k0 += kFK) {
      for (int e = threadIdx.x; e < kFTile * kFK; e += blockDim.x) {
        const int r = e / kFK, c = e % kFK, kk = k0 + c;
        sh.stage.A[c][r] = (q0 + r < nq && kk < dim) ? Q[size_t(q0 + r) * dim + kk] : 0.f;
        sh.stage.B[c][r] = (n0 + r < n && kk < dim) ? X[size_t(n0 + r) * dim + kk] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kFK; ++c) {
        float qa[4], xb[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) qa[i] = sh.stage.A[c][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) xb[j] = sh.stage.B[c][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (kL2) {
              const float d = qa[i] - xb[j];
              acc[i][j] = fmaf(d, d, acc[i][j]);
            } else {
              acc[i][j] = fmaf(qa[i], xb[j], acc[i][j]);
            }
          }
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int qi = ty + 16 * i;
        const int64_t row = n0 + tx + 16 * j;
        if (q0 + qi < nq && row < n)
          offer(sh.buf[qi], &st.count[qi], st.bound[qi], a, kL2 ? -acc[i][j] : acc[i][j], row);
      }
    __syncthreads();
    flush_tile<kFTile, kFTile>(sh.buf, st, q0, nq, a);
    __syncthreads();
  }
  store_sizes(st, q0, nq, a);
}

// ---- int8 on tensor cores: 32 queries x 128 rows per tile ------------------
// Tiles are staged in shared memory as 16 x 16 byte blocks so every WMMA
// fragment starts 256-byte aligned with ldm = 16, whatever dim is; rows past
// the end and bytes past dim are zero, so they add nothing to the sums.
constexpr int kIBM = 32, kIBN = 128, kIKT = 64, kIKS = kIKT / 16;

struct I8Stage {
  int8_t A[kIKS][kIBM][16];
  int8_t B[kIKS][kIBN][16];
};
union I8Shared {  // the staging and the buffers are never used at once
  I8Stage stage;
  Packed buf[kIBM][kIBN];
};

template <bool kVec16>
__global__ void __launch_bounds__(256)
    fused_i8_kernel(const int8_t* __restrict__ Q, const float* __restrict__ qscale, const float* __restrict__ qnorm2,
                    int nq, const int8_t* __restrict__ X, const float* __restrict__ xscale,
                    const float* __restrict__ xnorm2, int64_t n, int dim, bool l2, Queues a) {
  __shared__ __align__(256) I8Shared sh;
  __shared__ __align__(256) int Cs[8][16][16];
  __shared__ QueueState<kIBM> st;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.y * kIBM;
  const int64_t tiles = (n + kIBN - 1) / kIBN;
  init_queues(st);
  __syncthreads();
  for (int64_t t = blockIdx.x; t < tiles; t += a.n_slices) {
    const int64_t n0 = t * kIBN;
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
            *reinterpret_cast<int4*>(&sh.stage.A[ks][r][0]) = val;
          } else {
            if (n0 + r < n && kk < dim) val = *reinterpret_cast<const int4*>(X + size_t(n0 + r) * dim + kk);
            *reinterpret_cast<int4*>(&sh.stage.B[ks][r][0]) = val;
          }
        }
      } else {
        for (int e = threadIdx.x; e < (kIBM + kIBN) * kIKT; e += blockDim.x) {
          const bool is_a = e < kIBM * kIKT;
          const int w = is_a ? e : e - kIBM * kIKT;
          const int r = w / kIKT, kb = w % kIKT, kk = k0 + kb;
          if (is_a)
            sh.stage.A[kb / 16][r][kb % 16] = (q0 + r < nq && kk < dim) ? Q[size_t(q0 + r) * dim + kk] : int8_t(0);
          else
            sh.stage.B[kb / 16][r][kb % 16] = (n0 + r < n && kk < dim) ? X[size_t(n0 + r) * dim + kk] : int8_t(0);
        }
      }
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < kIKS; ++ks) {
        if (k0 + ks * 16 >= dim) break;  // uniform: the rest of the slices are zero
        wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> bf;
        wmma::load_matrix_sync(bf, reinterpret_cast<const signed char*>(&sh.stage.B[ks][warp * 16][0]), 16);
#pragma unroll
        for (int f = 0; f < 2; ++f) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> af;
          wmma::load_matrix_sync(af, reinterpret_cast<const signed char*>(&sh.stage.A[ks][f * 16][0]), 16);
          wmma::mma_sync(acc[f], af, bf, acc[f]);
        }
      }
      __syncthreads();
    }
    // Each warp scores its 16 rows for the 32 queries, one 16 x 16 fragment at a time.
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      wmma::store_matrix_sync(&Cs[warp][0][0], acc[f], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int qi = f * 16 + e / 16, q = q0 + qi;
        const int64_t row = n0 + warp * 16 + e % 16;
        if (q < nq && row < n) {
          const float v = ts::int8_score(Cs[warp][e / 16][e % 16], qscale ? qscale[q] : 1.f,
                                         xscale ? xscale[row] : 1.f, l2 ? qnorm2[q] : 0.f, l2 ? xnorm2[row] : 0.f, l2);
          offer(sh.buf[qi], &st.count[qi], st.bound[qi], a, v, row);
        }
      }
      __syncwarp();
    }
    __syncthreads();
    flush_tile<kIBM, kIBN>(sh.buf, st, q0, nq, a);
    __syncthreads();
  }
  store_sizes(st, q0, nq, a);
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

// One warp per query (tile_select.h, step 4): its S queues merged two at a
// time through two scratch arrays of k (tmp: 2k per query), written from
// query q_base on; -1 / -inf past what was found.
constexpr int kMergeThreads = 128;

__global__ void __launch_bounds__(kMergeThreads)
    merge_queues_kernel(Queues a, int nq, Packed* __restrict__ tmp, int64_t q_base, int64_t* __restrict__ out_ids,
                        float* __restrict__ out_scores) {
  const int q = int((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (q >= nq) return;  // the whole warp: q is the same for its lanes
  const uint64_t base = uint64_t(q) * a.n_slices;
  const Packed* best = a.slots + base * a.stride + a.current[base] * a.k;
  int size = a.sizes[base];
  Packed* scratch = tmp + uint64_t(q) * 2 * a.k;
  for (int s = 1; s < a.n_slices; ++s) {
    Packed* next = scratch + (s & 1 ? 0 : a.k);
    const int other_size = a.sizes[base + s];
    ts::merge_part(best, size, a.slots + (base + s) * a.stride + a.current[base + s] * a.k, other_size, a.k, lane, 32,
                   next);
    __syncwarp();
    size = ts::merged_size(size, other_size, a.k);
    best = next;
  }
  for (int r = lane; r < a.k; r += 32) {
    const size_t o = size_t(q_base + q) * a.k + r;
    out_ids[o] = r < size ? int64_t(ts::packed_row(best[r])) : -1;
    out_scores[o] = r < size ? ts::packed_score(best[r]) : -INFINITY;
  }
}

void check_search_args(size_t nq, size_t n, size_t dim, size_t k, Metric metric, const void* q, const void* db,
                       int64_t* ids, float* scores, const RowFilter* filter) {
  if (metric == Metric::Cosine)
    throw std::invalid_argument("cuda exact search: metric must be 'ip' or 'l2' (normalise the rows for cosine)");
  if (k == 0 || k > kMaxTopK)
    throw std::invalid_argument("cuda exact search: k must be in [1, " + std::to_string(kMaxTopK) + "]");
  if (dim == 0 || dim > (size_t(1) << 17)) throw std::invalid_argument("cuda exact search: dim must be in [1, 131072]");
  if (n >= (size_t(1) << 31) || nq >= (size_t(1) << 31))
    throw std::invalid_argument("cuda exact search: at most 2^31 - 1 rows and queries");
  if ((nq && !q) || (n && !db) || (nq && (!ids || !scores)))
    throw std::invalid_argument("cuda exact search: null pointer");
  if (filter && filter->n_words && !filter->words) throw std::invalid_argument("cuda exact search: null filter words");
}

// How the rows are cut for nq queries in tiles of query_tile x row_tile:
// enough slices for about 4 blocks per SM, no more slices than row tiles, and
// queries chunked so the queues stay under 512 MiB (and the grid's y under
// its 65,535 limit).
struct Plan {
  int slices;
  size_t chunk;  // queries per launch
};

Plan plan_for(size_t nq, size_t n, size_t k, int query_tile, int row_tile) {
  int device = 0, sms = 0;
  MR_CUDA_CHECK(cudaGetDevice(&device));
  MR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t q_tiles = (nq + query_tile - 1) / query_tile;
  const size_t r_tiles = (n + row_tile - 1) / row_tile;
  size_t slices = (size_t(4) * size_t(std::max(sms, 1)) + q_tiles - 1) / q_tiles;
  slices = std::max<size_t>(1, std::min(slices, r_tiles));
  const size_t per_query = slices * (2 * k + row_tile) * sizeof(Packed);
  size_t chunk = std::min(std::max<size_t>(1, (size_t(512) << 20) / per_query), size_t(65535) * query_tile);
  if (chunk >= size_t(query_tile)) chunk -= chunk % query_tile;
  return {int(slices), std::min(nq, chunk)};
}

// Runs the fused search in query chunks: tile_launch(q0, qc, grid, queues)
// starts the fused kernel for queries [q0, q0 + qc), then the merge writes them.
template <class TileLaunch>
void search_common(size_t nq, size_t n, size_t k, int query_tile, int row_tile, const RowFilter* filter,
                   int64_t* ids, float* scores, Timing* timing, TileLaunch&& tile_launch) {
  if (nq == 0) return;
  if (n == 0) {
    std::fill(ids, ids + nq * k, int64_t(-1));
    std::fill(scores, scores + nq * k, -std::numeric_limits<float>::infinity());
    return;
  }
  const Plan plan = plan_for(nq, n, k, query_tile, row_tile);
  const uint64_t stride = 2 * k + row_tile;
  DeviceBuffer<Packed> slots(plan.chunk * plan.slices * stride), tmp(plan.chunk * 2 * k);
  DeviceBuffer<int> sizes(plan.chunk * plan.slices), current(plan.chunk * plan.slices);
  DeviceBuffer<uint64_t> allowed;
  const bool filtered = filter != nullptr;
  if (filtered && filter->n_words) allowed.upload(filter->words, filter->n_words);
  // A filter with no words allows nothing: an empty bitset, not "no filter".
  static const uint64_t kNoWord = 0;
  DeviceBuffer<uint64_t> empty;
  if (filtered && !filter->n_words) empty.upload(&kNoWord, 1);
  DeviceBuffer<int64_t> d_ids(nq * k);
  DeviceBuffer<float> d_scores(nq * k);
  const Queues queues{slots.get(), sizes.get(), current.get(), plan.slices, stride, int(k),
                      !filtered ? nullptr : (filter->n_words ? allowed.get() : empty.get()),
                      filtered ? uint64_t(filter->n_words) : 0};
  auto launch_all = [&] {
    for (size_t q0 = 0; q0 < nq; q0 += plan.chunk) {
      const size_t qc = std::min(plan.chunk, nq - q0);
      tile_launch(q0, qc, dim3(unsigned(plan.slices), detail::blocks_for(qc, unsigned(query_tile))), queues);
      merge_queues_kernel<<<detail::blocks_for(qc * 32, kMergeThreads), kMergeThreads>>>(
          queues, int(qc), tmp.get(), int64_t(q0), d_ids.get(), d_scores.get());
      MR_CUDA_LAUNCHED("merge_queues_kernel");
    }
  };
  launch_all();
  MR_CUDA_CHECK(cudaDeviceSynchronize());
  d_ids.download(ids, nq * k);
  d_scores.download(scores, nq * k);
  detail::time_kernels(timing, launch_all);
}

// Searches a device-resident database (queries uploaded here).
void search_f32_resident(const float* queries, size_t nq, const float* d_x, size_t n, size_t dim, size_t k,
                         Metric metric, const RowFilter* filter, int64_t* ids, float* scores, Timing* timing) {
  DeviceBuffer<float> d_q;
  d_q.upload(queries, nq * dim);
  search_common(nq, n, k, kFTile, kFTile, filter, ids, scores, timing,
                [&](size_t q0, size_t qc, dim3 grid, const Queues& queues) {
                  if (metric == Metric::L2)
                    fused_f32_kernel<true><<<grid, 256>>>(d_q.get() + q0 * dim, int(qc), d_x, int64_t(n), int(dim),
                                                          queues);
                  else
                    fused_f32_kernel<false><<<grid, 256>>>(d_q.get() + q0 * dim, int(qc), d_x, int64_t(n),
                                                           int(dim), queues);
                  MR_CUDA_LAUNCHED("fused_f32_kernel");
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
                        const float* d_xn, size_t n, size_t dim, size_t k, Metric metric, const RowFilter* filter,
                        int64_t* ids, float* scores, Timing* timing) {
  DeviceBuffer<int8_t> d_q;
  DeviceBuffer<float> d_qs, d_qn;
  d_q.upload(queries, nq * dim);
  if (qscale) d_qs.upload(qscale, nq);
  const bool l2 = metric == Metric::L2;
  if (l2) norms_i8(d_q.get(), nq, dim, d_qn);
  const bool vec16 = dim % 16 == 0;  // cudaMalloc bases are 256-byte aligned
  search_common(nq, n, k, kIBM, kIBN, filter, ids, scores, timing,
                [&](size_t q0, size_t qc, dim3 grid, const Queues& queues) {
                  const float* qs = qscale ? d_qs.get() + q0 : nullptr;
                  const float* qn = l2 ? d_qn.get() + q0 : nullptr;
                  if (vec16)
                    fused_i8_kernel<true><<<grid, 256>>>(d_q.get() + q0 * dim, qs, qn, int(qc), d_x, d_xs, d_xn,
                                                         int64_t(n), int(dim), l2, queues);
                  else
                    fused_i8_kernel<false><<<grid, 256>>>(d_q.get() + q0 * dim, qs, qn, int(qc), d_x, d_xs, d_xn,
                                                          int64_t(n), int(dim), l2, queues);
                  MR_CUDA_LAUNCHED("fused_i8_kernel");
                });
}

}  // namespace

void exact_search_f32(const float* queries, size_t nq, const float* db, size_t n, size_t dim, size_t k,
                      Metric metric, int64_t* ids, float* scores, Timing* timing, const RowFilter* filter) {
  detail::require_device();
  check_search_args(nq, n, dim, k, metric, queries, db, ids, scores, filter);
  DeviceBuffer<float> d_x;
  d_x.upload(db, n * dim);
  search_f32_resident(queries, nq, d_x.get(), n, dim, k, metric, filter, ids, scores, timing);
}

void exact_search_i8(const int8_t* queries, const float* qscale, size_t nq, const int8_t* db, const float* dbscale,
                     size_t n, size_t dim, size_t k, Metric metric, int64_t* ids, float* scores, Timing* timing,
                     const RowFilter* filter) {
  detail::require_device();
  check_search_args(nq, n, dim, k, metric, queries, db, ids, scores, filter);
  DeviceBuffer<int8_t> d_x;
  DeviceBuffer<float> d_xs, d_xn;
  d_x.upload(db, n * dim);
  if (dbscale) d_xs.upload(dbscale, n);
  if (metric == Metric::L2) norms_i8(d_x.get(), n, dim, d_xn);
  search_i8_resident(queries, qscale, nq, d_x.get(), dbscale ? d_xs.get() : nullptr, d_xn.get(), n, dim, k, metric,
                     filter, ids, scores, timing);
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
                             Timing* timing, const RowFilter* filter) const {
  if (impl_->int8) throw std::invalid_argument("cuda table holds int8 rows: use search_i8");
  check_search_args(nq, impl_->n, impl_->dim, k, metric, queries, impl_->rows_f32.get(), ids, scores, filter);
  search_f32_resident(queries, nq, impl_->rows_f32.get(), impl_->n, impl_->dim, k, metric, filter, ids, scores,
                      timing);
}

void DeviceTable::search_i8(const int8_t* queries, const float* qscale, size_t nq, size_t k, Metric metric,
                            int64_t* ids, float* scores, Timing* timing, const RowFilter* filter) const {
  if (!impl_->int8) throw std::invalid_argument("cuda table holds float32 rows: use search_f32");
  check_search_args(nq, impl_->n, impl_->dim, k, metric, queries, impl_->rows_i8.get(), ids, scores, filter);
  search_i8_resident(queries, qscale, nq, impl_->rows_i8.get(), impl_->has_scales ? impl_->scales.get() : nullptr,
                     impl_->norms.get(), impl_->n, impl_->dim, k, metric, filter, ids, scores, timing);
}

size_t DeviceTable::rows() const { return impl_->n; }
size_t DeviceTable::dim() const { return impl_->dim; }
bool DeviceTable::is_int8() const { return impl_->int8; }
size_t DeviceTable::device_bytes() const {
  const Impl& t = *impl_;
  return t.rows_f32.size() * sizeof(float) + t.rows_i8.size() + (t.scales.size() + t.norms.size()) * sizeof(float);
}

}  // namespace medretrieve::cuda
