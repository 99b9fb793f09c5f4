// Vector storage shared by the HNSW graph and the flat index.
//
// One contiguous slab per element (hnswlib style, usearch-like explicit layout):
//
//   [u32 header: link count (bits 0-15) | deleted (bit 16) | labels exact (bit 17)]
//   [link_slots level-0 neighbour ids, link_bits each, packed]  (0 slots for the flat index)
//   [u64 label signature] [f32 scale] [f32 aux] [code: dim int8 or dim float32]
//
// with the element stride rounded to 16 bytes and the code 16-byte aligned.
// Level-0 ids take the bits the capacity needs (at least kMinLinkBits; 32 is
// a plain u32 array, the layout of format versions 1-2): at 100k elements 17
// bits, so a 32-link list takes 68 bytes instead of 128 and a 384-d int8 slab
// 480 instead of 544. Upper-level links (rare) stay u32 (hnsw.h).
// External ids (u64) live in a separate array plus a hash map ext -> internal.
//
// int8 scheme (kernels/quantizer.h): x = c + s * code, c a trained centre, s per
// vector. "aux" keeps what stored-stored similarities need:
//   ip/cosine: aux = c . r   so x.y = c.c + aux_x + aux_y + s_x s_y dot_i8
//   l2:        aux = |r|^2   so |x-y|^2 = aux_x + aux_y - 2 s_x s_y dot_i8
// Queries: ip quantizes q WITHOUT centring (q.c is exact and constant per
// query); l2 quantizes q' = q - c. Either way one dot_i8 and one multiply-add
// per visited element. Cosine normalises inputs and then is ip.
//
// Distances used inside are "lower is closer": -ip for ip/cosine, squared L2
// for l2. Similarity (native API) = -distance.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/metric.h"
#include "index/sketch.h"
#include "kernels/distances.h"

namespace medretrieve::index {

// An index's "space" is the core's one metric (common/metric.h).
using Space = Metric;
enum class DType : uint32_t { Float32 = 0, Int8 = 1 };

DType parse_dtype(const std::string& name);  // "float32" | "int8"
const char* dtype_name(DType d);

// External ids are in [0, kMaxExtId]: searches return them as int64 with -1
// as padding, so a larger id could only come back negative.
constexpr uint64_t kMaxExtId = uint64_t(INT64_MAX);
// Throws std::invalid_argument naming the first id above kMaxExtId.
void check_ext_ids(const uint64_t* ids, size_t n);

// Vector components the index stores or searches with are finite and within
// +-kMaxComponent: then every inner product and squared distance over up to
// 2^20 dimensions stays finite in float32 (2^20 * (2e15)^2 < 3.4e38), so no
// score is inf or NaN (which would be garbage, and break orderings).
constexpr float kMaxComponent = 1e15f;
// Bounds for stored values derived from such components (load checks): int8
// scale = max |x - c| / 127, aux = |r|^2 or c.r.
constexpr float kMaxScale = 2 * kMaxComponent / 127;
constexpr float kMaxAux = 4.5e36f;
// Throws std::invalid_argument "<what> contain NaN, infinite or too large
// values (row i): ..." for n rows of dim components.
void check_components(const float* x, size_t n, size_t dim, const std::string& what);

// A prepared query: normalised (cosine), quantized once (int8).
struct QueryCtx {
  std::vector<float> vec;     // the query as searched
  std::vector<int8_t> code;   // int8 storage only
  float base = 0.f;           // ip: -(q . c);  l2: |q - c|^2
  float factor = 0.f;         // ip: -s_q;      l2: -2 s_q
};

// The i-th `bits`-wide field of a packed id list (the mask keeps `bits` bits).
// Reads 8 bytes from the field's first byte: callers leave that much room.
inline uint32_t unpack_id(const char* list, size_t i, uint32_t bits, uint32_t mask) {
  const size_t bit = i * bits;
  uint64_t word;
  std::memcpy(&word, list + (bit >> 3), sizeof word);
  return uint32_t(word >> (bit & 7)) & mask;
}

class VectorStore {
 public:
  static constexpr uint32_t kCountMask = 0xFFFFu;
  static constexpr uint32_t kDeletedBit = 1u << 16;
  static constexpr uint32_t kLabelsExactBit = 1u << 17;
  // Rows used to train the centre from the first add batch.
  static constexpr size_t kTrainRows = 100000;
  // A first batch smaller than this leaves the centre at zero (untrained data
  // is too little to estimate a mean from).
  static constexpr size_t kMinTrainRows = 256;

  // sketch: keep the int8 codes' sign sketches (index/sketch.h) for the filtered search's scans; inner product and
  // cosine only (a squared L2 distance also needs the row's norm, which signs do not give).
  VectorStore(Space space, DType dtype, size_t dim, size_t link_slots, bool keep_float, bool sketch = false);
  ~VectorStore();
  VectorStore(const VectorStore&) = delete;
  VectorStore& operator=(const VectorStore&) = delete;

  // --- geometry ---
  Space space() const { return space_; }
  DType dtype() const { return dtype_; }
  size_t dim() const { return dim_; }
  size_t link_slots() const { return link_slots_; }
  uint32_t link_bits() const { return link_bits_; }
  size_t stride() const { return stride_; }
  size_t code_offset() const { return off_code_; }
  bool keep_float() const { return keep_float_; }
  bool read_only() const { return !owned_; }
  size_t capacity() const { return capacity_; }
  size_t count() const { return count_.load(std::memory_order_acquire); }
  size_t deleted_count() const { return deleted_.load(std::memory_order_relaxed); }
  // Grows (or shrinks down to count()) the slab array; when the new capacity
  // needs wider link ids every slab is rewritten in the wider layout (ids
  // never narrow). Exclusive lock held by the caller.
  void reserve(size_t capacity);
  // Sets the layout a file was saved with (before its slabs are copied or
  // mapped in): only on an empty store.
  void use_link_bits(uint32_t bits);
  static constexpr uint32_t kMinLinkBits = 16;
  // The id width a capacity needs (at least kMinLinkBits).
  static uint32_t link_bits_for(size_t capacity);

  // --- slab access ---
  char* slab(uint32_t id) const { return data_ + size_t(id) * stride_; }
  uint32_t header(uint32_t id) const {
    return __atomic_load_n(reinterpret_cast<uint32_t*>(slab(id)), __ATOMIC_ACQUIRE);
  }
  uint32_t link_count0(uint32_t id) const { return header(id) & kCountMask; }
  // The i-th level-0 link of `id` (i < link_slots()). A search that reads a
  // list while a writer rewrites it may get a torn id, below 2^link_bits but
  // not necessarily below the capacity: lock-free readers check the bound.
  uint32_t link0(uint32_t id, size_t i) const {
    return unpack_id(slab(id) + 4, i, link_bits_, link_mask_);  // the 16 bytes of sig, scale and aux follow
  }
  // Decodes the level-0 links of `id` into out (link_slots() room); returns how many.
  uint32_t read_links0(uint32_t id, uint32_t* out) const {
    const uint32_t n = link_count0(id);
    for (uint32_t i = 0; i < n; ++i) out[i] = link0(id, i);
    return n;
  }
  // Packs ids[0..n) (each below the capacity) into `id`'s list, then publishes the count.
  void write_links0(uint32_t id, const uint32_t* ids, uint32_t n);
  bool is_deleted(uint32_t id) const { return header(id) & kDeletedBit; }
  // Returns the previous state.
  bool set_deleted(uint32_t id, bool deleted);
  uint64_t signature(uint32_t id) const { return *reinterpret_cast<const uint64_t*>(slab(id) + off_sig_); }
  bool labels_exact(uint32_t id) const { return header(id) & kLabelsExactBit; }
  void set_signature(uint32_t id, uint64_t sig, bool exact);
  float scale(uint32_t id) const { return *reinterpret_cast<const float*>(slab(id) + off_scale_); }
  float aux(uint32_t id) const { return *reinterpret_cast<const float*>(slab(id) + off_aux_); }
  const int8_t* code_i8(uint32_t id) const { return reinterpret_cast<const int8_t*>(slab(id) + off_code_); }
  const float* code_f32(uint32_t id) const { return reinterpret_cast<const float*>(slab(id) + off_code_); }
  // float32 originals (keep_float with int8 storage), else nullptr.
  const float* original(uint32_t id) const { return floats_ ? floats_ + size_t(id) * dim_ : nullptr; }
  // Starts the reads distance() will make: the line holding scale and aux and
  // the code up to kPrefetchCodeBytes (the hardware streamer carries on from
  // there for longer float32 rows). One line at a time would leave the
  // distance loop waiting on memory for every line of a 768-byte code.
  void prefetch(uint32_t id) const {
    const char* p = slab(id);
    for (size_t off = off_scale_ & ~size_t(63); off < prefetch_end_; off += 64) __builtin_prefetch(p + off);
  }
  // How many vectors graph search keeps prefetched ahead of the one it scores:
  // about kLinesInFlight cache lines (what a core's miss buffers hold), so
  // 4 short int8 codes (384-d: 7 lines each) or 2 longer vectors.
  size_t prefetch_ahead() const { return prefetch_ahead_; }
  // Starts the read of id's header and level-0 link list (the lines before
  // those prefetch() covers).
  void prefetch_links0(uint32_t id) const {
    const char* p = slab(id);
    __builtin_prefetch(p);
    __builtin_prefetch(p + off_sig_ - 1);
  }

  // --- quantization ---
  bool trained() const { return trained_; }
  // Centre = mean of the raw sample rows, each prepared (normalised for
  // cosine) on the fly, without copying the sample; n == 0 means zero centre.
  void train(const float* sample, size_t n);
  const float* centre() const { return centre_.data(); }
  float centre_norm2() const { return centre_norm2_; }
  // Cosine: writes a normalised copy into buf and returns it; otherwise x.
  // Throws on a zero vector in cosine space.
  const float* prepare_input(const float* x, std::vector<float>& buf) const;
  // Encodes a prepared vector into the slab of `id` (and its float original).
  void encode(uint32_t id, const float* x);
  void prepare_query(const float* q, QueryCtx& ctx) const;
  float distance(const QueryCtx& ctx, uint32_t id) const {
    if (dtype_ == DType::Int8) {
      const float d = float(kt_->dot_i8(ctx.code.data(), code_i8(id), dim_)) * scale(id);
      return space_ == Space::L2 ? ctx.base + aux(id) + ctx.factor * d : ctx.base + ctx.factor * d;
    }
    return space_ == Space::L2 ? kt_->l2sq_f32(ctx.vec.data(), code_f32(id), dim_)
                               : -kt_->dot_f32(ctx.vec.data(), code_f32(id), dim_);
  }
  // out[j] = distance(ctx, ids[j]) for j < 4, to the bit: int8 codes go
  // through one four-code kernel call (the query read once per block).
  void distance4(const QueryCtx& ctx, const uint32_t* ids, float* out) const {
    if (dtype_ != DType::Int8) {
      for (size_t j = 0; j < 4; ++j) out[j] = distance(ctx, ids[j]);
      return;
    }
    const int8_t* codes[4] = {code_i8(ids[0]), code_i8(ids[1]), code_i8(ids[2]), code_i8(ids[3])};
    int32_t dots[4];
    kt_->dot_i8_x4(ctx.code.data(), codes, dim_, dots);
    for (size_t j = 0; j < 4; ++j) {
      const float d = float(dots[j]) * scale(ids[j]);
      out[j] = space_ == Space::L2 ? ctx.base + aux(ids[j]) + ctx.factor * d : ctx.base + ctx.factor * d;
    }
  }
  // out[j] = distance(ctx, first + j) for j < n, to the bit: float32 rows
  // through one rows-kernel call (a flat scan's block of consecutive slabs).
  void distances(const QueryCtx& ctx, uint32_t first, size_t n, float* out) const {
    if (dtype_ == DType::Int8) {
      for (size_t j = 0; j < n; ++j) out[j] = distance(ctx, first + uint32_t(j));
      return;
    }
    const char* rows = slab(first) + off_code_;
    if (space_ == Space::L2) return kt_->l2sq_f32_rows(ctx.vec.data(), rows, stride_, dim_, n, out);
    kt_->dot_f32_rows(ctx.vec.data(), rows, stride_, dim_, n, out);
    for (size_t j = 0; j < n; ++j) out[j] = -out[j];
  }
  // Exact float32 distance from the kept originals (falls back to distance()).
  float exact_distance(const QueryCtx& ctx, uint32_t id) const;
  float distance_between(uint32_t a, uint32_t b) const;
  // |x| of a stored element, inner-product space (from its int8 code: ~1% rounding).
  float ip_norm(uint32_t id) const;
  // The rows' sign sketches, or null when the store keeps none.
  const SignSketches* sketches() const { return sketches_ ? &*sketches_ : nullptr; }
  // Derives them from the stored codes (int8, inner product or cosine; otherwise none are kept), or frees them.
  // Exclusive lock held by the caller.
  void keep_sketches(bool keep);
  // Dequantized (or copied) vector of `id`.
  void decode(uint32_t id, float* out) const;

  // --- external ids ---
  uint64_t ext_id(uint32_t id) const { return ext_[id]; }
  // Whether every slot's external id is the slot itself (ids 0..count-1 added in order, the common case):
  // a bitset over external ids is then one over slots (AllowedRows::from_external reads it in place).
  bool ids_are_slots() const { return foreign_ids_.load(std::memory_order_acquire) == 0; }
  bool find(uint64_t ext, uint32_t& id) const;
  // Appends n new elements with the given external ids; returns the first
  // internal id. Throws std::runtime_error when capacity would be exceeded.
  uint32_t allocate(const uint64_t* ext, size_t n);
  // Re-points a slot to a new external id (replace_deleted).
  void rebind(uint32_t id, uint64_t new_ext);
  void note_deleted_delta(long delta) { deleted_.fetch_add(size_t(delta), std::memory_order_relaxed); }

  // --- persistence support ---
  char* slab_data() const { return data_; }
  float* float_data() const { return floats_; }
  std::vector<float>& centre_mut() { return centre_; }
  void set_trained(bool t);
  // Restores count, ids and deleted counter after the slabs were filled (copy load).
  void restore(size_t count, const uint64_t* ext);
  // Read-only serving: slabs and floats point into a mapping the caller owns.
  void attach_readonly(char* slabs, float* floats, size_t count, const uint64_t* ext);
  size_t memory_bytes() const;

 private:
  void free_buffers();
  // The sketches of the first `count` rows, from their codes, in room for the capacity.
  void derive_sketches(size_t count);
  Space space_;
  DType dtype_;
  // Offsets and stride of the layout with `bits`-wide level-0 ids.
  void set_layout(uint32_t bits);
  // Packs ids[0..n) into the list at `list` (link_slots() fields of link_bits_), zeroing the unused ones.
  void pack_links(char* list, const uint32_t* ids, uint32_t n) const;
  void set_link_count0(uint32_t id, uint32_t n);
  size_t dim_, link_slots_;
  bool keep_float_;
  static constexpr size_t kPrefetchCodeBytes = 1024;
  static constexpr size_t kLinesInFlight = 28;
  size_t prefetch_ahead_ = 2;
  uint32_t link_bits_ = 32, link_mask_ = ~0u;
  size_t off_sig_, off_scale_, off_aux_, off_code_, stride_, prefetch_end_;
  const kernels::KernelTable* kt_;

  char* data_ = nullptr;
  float* floats_ = nullptr;
  bool owned_ = true;
  size_t capacity_ = 0;
  std::atomic<size_t> count_{0};
  std::atomic<size_t> deleted_{0};

  std::vector<float> centre_;
  float centre_norm2_ = 0.f;
  std::optional<SignSketches> sketches_;
  bool trained_ = false;

  std::vector<uint64_t> ext_;
  std::atomic<size_t> foreign_ids_{0};  // slots whose external id is not the slot
  std::unordered_map<uint64_t, uint32_t> map_;
  mutable std::mutex ids_mu_;
};

}  // namespace medretrieve::index
