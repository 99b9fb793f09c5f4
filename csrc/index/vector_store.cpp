#include "index/vector_store.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "index/huge_pages.h"
#include "kernels/quantizer.h"

namespace medretrieve::index {

namespace {
size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// The query's constant terms in double precision (they shift every score of a
// query alike, and their rounding would show in reported scores), with four
// accumulators: one would make a chain of dependent additions per dimension.
double dot_f64(const float* a, const float* b, size_t n) {
  double s[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t j = 0; j < 4; ++j) s[j] += double(a[i + j]) * b[i + j];
  for (; i < n; ++i) s[0] += double(a[i]) * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

double l2sq_f64(const float* a, const float* b, size_t n) {
  double s[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t j = 0; j < 4; ++j) {
      const double r = double(a[i + j]) - b[i + j];
      s[j] += r * r;
    }
  for (; i < n; ++i) {
    const double r = double(a[i]) - b[i];
    s[0] += r * r;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}
}  // namespace

DType parse_dtype(const std::string& name) {
  if (name == "float32") return DType::Float32;
  if (name == "int8") return DType::Int8;
  throw std::invalid_argument("dtype must be 'float32' or 'int8', got '" + name + "'");
}

void check_ext_ids(const uint64_t* ids, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (ids[i] > kMaxExtId)
      throw std::invalid_argument("id " + std::to_string(ids[i]) +
                                  " is out of range: ids must be integers in [0, 2**63 - 1] (search returns int64 "
                                  "ids, with -1 as padding)");
}

void check_components(const float* x, size_t n, size_t dim, const std::string& what) {
  // Every query passes here: one pass without an early exit (SSE2, part of
  // every x86-64 CPU); the offending row is looked for only on failure.
  const size_t total = n * dim;
  size_t i = 0;
  bool ok = true;
#if defined(__SSE2__)
  const __m128 sign = _mm_set1_ps(-0.f), limit = _mm_set1_ps(kMaxComponent);
  __m128 all = _mm_castsi128_ps(_mm_set1_epi32(-1));
  for (; i + 4 <= total; i += 4)  // |x| <= limit is false for NaN too
    all = _mm_and_ps(all, _mm_cmple_ps(_mm_andnot_ps(sign, _mm_loadu_ps(x + i)), limit));
  ok = _mm_movemask_ps(all) == 0xF;
#endif
  for (; i < total; ++i) ok &= std::fabs(x[i]) <= kMaxComponent;
  if (ok) return;
  i = 0;
  while (std::fabs(x[i]) <= kMaxComponent) ++i;
  throw std::invalid_argument(what + " contain NaN, infinite or too large values (row " + std::to_string(i / dim) +
                              "): components must be finite and within +-1e15");
}

const char* dtype_name(DType d) { return d == DType::Int8 ? "int8" : "float32"; }

VectorStore::VectorStore(Space space, DType dtype, size_t dim, size_t link_slots, bool keep_float, bool sketch)
    : space_(space), dtype_(dtype), dim_(dim), link_slots_(link_slots),
      keep_float_(keep_float && dtype == DType::Int8), kt_(&kernels::active()), centre_(dim, 0.f) {
  if (dim == 0) throw std::invalid_argument("dim must be positive");
  if (dtype == DType::Int8 && dim > kernels::kMaxInt8Dim)
    throw std::invalid_argument("int8 storage supports at most 131072 dimensions");
  if (link_slots > kCountMask) throw std::invalid_argument("too many links per element");
  set_layout(kMinLinkBits);
  if (dtype == DType::Float32) trained_ = true;  // nothing to train
  if (sketch) keep_sketches(true);
}

void VectorStore::keep_sketches(bool keep) {
  if (!keep || dtype_ != DType::Int8 || space_ == Space::L2) {
    sketches_.reset();
    return;
  }
  if (sketches_) return;
  sketches_.emplace(dim_);
  derive_sketches(count());
}

void VectorStore::derive_sketches(size_t count) {
  sketches_->reserve(capacity_, 0);
  for (size_t i = 0; i < count; ++i) sketches_->set(uint32_t(i), code_i8(uint32_t(i)), scale(uint32_t(i)), dim_);
}

void VectorStore::set_layout(uint32_t bits) {
  link_bits_ = bits;
  link_mask_ = bits == 32 ? ~0u : (1u << bits) - 1;
  off_sig_ = align_up(4 + (link_slots_ * bits + 7) / 8, 8);
  off_scale_ = off_sig_ + 8;
  off_aux_ = off_scale_ + 4;
  off_code_ = align_up(off_aux_ + 4, 16);
  stride_ = align_up(off_code_ + dim_ * (dtype_ == DType::Int8 ? 1 : 4), 16);
  prefetch_end_ = std::min(stride_, off_code_ + kPrefetchCodeBytes);
  const size_t lines = (prefetch_end_ - (off_scale_ & ~size_t(63)) + 63) / 64;
  prefetch_ahead_ = std::clamp<size_t>(kLinesInFlight / lines, 2, 8);
}

uint32_t VectorStore::link_bits_for(size_t capacity) {
  uint32_t bits = kMinLinkBits;
  while (bits < 32 && (uint64_t(1) << bits) < capacity) ++bits;
  return bits;
}

void VectorStore::use_link_bits(uint32_t bits) {
  if (count() || data_) throw std::logic_error("use_link_bits on a store that holds slabs");
  if (bits < kMinLinkBits || bits > 32) throw std::invalid_argument("link id width must be 16-32 bits");
  set_layout(bits);
}

VectorStore::~VectorStore() { free_buffers(); }

void VectorStore::free_buffers() {
  if (owned_) {
    std::free(data_);
    std::free(floats_);
  }
  data_ = nullptr;
  floats_ = nullptr;
}

void VectorStore::reserve(size_t capacity) {
  if (!owned_) throw std::runtime_error("read-only memory-mapped index: cannot resize");
  const size_t n = count();
  if (capacity < n) capacity = n;
  if (capacity == capacity_) return;
  const uint32_t bits = std::max(link_bits_, link_bits_for(capacity));
  if (sketches_) sketches_->reserve(capacity, n);  // first: a failed allocation here leaves the slabs as they were
  char* data;
  if (bits == link_bits_ || link_slots_ == 0) {
    data = alloc_zeroed(capacity * stride_);
    if (data_ && n) std::memcpy(data, data_, n * stride_);
  } else {  // wider ids: every slab moves to the new layout
    const size_t old_stride = stride_, old_sig = off_sig_, old_code = off_code_;
    const uint32_t old_bits = link_bits_, old_mask = link_mask_;
    std::vector<uint32_t> ids(link_slots_);
    set_layout(bits);
    try {
      data = alloc_zeroed(capacity * stride_);
    } catch (...) {
      set_layout(old_bits);  // nothing moved: the store stays as it was
      throw;
    }
    for (size_t i = 0; i < n; ++i) {
      const char* from = data_ + i * old_stride;
      char* to = data + i * stride_;
      uint32_t head;
      std::memcpy(&head, from, 4);
      const uint32_t links = head & kCountMask;
      for (uint32_t j = 0; j < links; ++j) ids[j] = unpack_id(from + 4, j, old_bits, old_mask);
      std::memcpy(to, &head, 4);
      pack_links(to + 4, ids.data(), links);
      std::memcpy(to + off_sig_, from + old_sig, 16);  // signature, scale, aux
      std::memcpy(to + off_code_, from + old_code, stride_ - off_code_);  // the code, padded alike in both layouts
    }
  }
  float* floats = nullptr;
  if (keep_float_) {
    floats = reinterpret_cast<float*>(alloc_zeroed(capacity * dim_ * sizeof(float)));
    if (floats_ && n) std::memcpy(floats, floats_, n * dim_ * sizeof(float));
  }
  free_buffers();
  data_ = data;
  floats_ = floats;
  capacity_ = capacity;
  ext_.resize(capacity);
}

void VectorStore::pack_links(char* list, const uint32_t* ids, uint32_t n) const {
  const size_t bytes = (link_slots_ * link_bits_ + 7) / 8;
  size_t out = 0;
  uint64_t acc = 0;  // bits not yet written, lowest first
  uint32_t held = 0;
  for (uint32_t i = 0; i < n; ++i) {
    acc |= uint64_t(ids[i] & link_mask_) << held;
    for (held += link_bits_; held >= 8; held -= 8, acc >>= 8) list[out++] = char(acc & 0xFF);
  }
  if (held) list[out++] = char(acc & 0xFF);
  std::memset(list + out, 0, bytes - out);
}

void VectorStore::write_links0(uint32_t id, const uint32_t* ids, uint32_t n) {
  pack_links(slab(id) + 4, ids, n);
  set_link_count0(id, n);
}

void VectorStore::set_link_count0(uint32_t id, uint32_t n) {
  uint32_t* h = reinterpret_cast<uint32_t*>(slab(id));
  uint32_t old = __atomic_load_n(h, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(h, &old, (old & ~kCountMask) | n, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
  }
}

bool VectorStore::set_deleted(uint32_t id, bool deleted) {
  uint32_t* h = reinterpret_cast<uint32_t*>(slab(id));
  uint32_t old = deleted ? __atomic_fetch_or(h, kDeletedBit, __ATOMIC_ACQ_REL)
                         : __atomic_fetch_and(h, ~kDeletedBit, __ATOMIC_ACQ_REL);
  return old & kDeletedBit;
}

void VectorStore::set_signature(uint32_t id, uint64_t sig, bool exact) {
  std::memcpy(slab(id) + off_sig_, &sig, sizeof sig);
  uint32_t* h = reinterpret_cast<uint32_t*>(slab(id));
  if (exact)
    __atomic_fetch_or(h, kLabelsExactBit, __ATOMIC_RELEASE);
  else
    __atomic_fetch_and(h, ~kLabelsExactBit, __ATOMIC_RELEASE);
}

void VectorStore::set_trained(bool t) {
  trained_ = t;
  double cc = 0;
  for (float c : centre_) cc += double(c) * c;
  centre_norm2_ = float(cc);
}

void VectorStore::train(const float* sample, size_t n) {
  std::fill(centre_.begin(), centre_.end(), 0.f);
  if (dtype_ == DType::Int8 && n > 0) {
    std::vector<double> acc(dim_, 0.0);
    std::vector<float> buf;
    for (size_t i = 0; i < n; ++i) {
      const float* row = prepare_input(sample + i * dim_, buf);
      for (size_t j = 0; j < dim_; ++j) acc[j] += row[j];
    }
    for (size_t j = 0; j < dim_; ++j) centre_[j] = float(acc[j] / double(n));
  }
  set_trained(true);
}

const float* VectorStore::prepare_input(const float* x, std::vector<float>& buf) const {
  if (space_ != Space::Cosine) return x;
  double n2 = 0;
  for (size_t i = 0; i < dim_; ++i) n2 += double(x[i]) * x[i];
  if (n2 == 0) throw std::invalid_argument("cosine space cannot normalise a zero vector");
  const float inv = float(1.0 / std::sqrt(n2));
  buf.resize(dim_);
  for (size_t i = 0; i < dim_; ++i) buf[i] = x[i] * inv;
  return buf.data();
}

void VectorStore::encode(uint32_t id, const float* x) {
  char* s = slab(id);
  float scale = 1.f, aux = 0.f;
  if (dtype_ == DType::Int8) {
    int8_t* code = reinterpret_cast<int8_t*>(s + off_code_);
    scale = kernels::quantize_i8(x, centre_.data(), dim_, code);
    if (space_ == Space::L2) {
      aux = kernels::code_norm2(code, scale, dim_);
    } else {
      double cr = 0;
      for (size_t i = 0; i < dim_; ++i) cr += double(centre_[i]) * code[i];
      aux = float(cr * scale);
    }
    if (floats_) std::memcpy(floats_ + size_t(id) * dim_, x, dim_ * sizeof(float));
    if (sketches_) sketches_->set(id, code, scale, dim_);
  } else {
    std::memcpy(s + off_code_, x, dim_ * sizeof(float));
  }
  std::memcpy(s + off_scale_, &scale, sizeof scale);
  std::memcpy(s + off_aux_, &aux, sizeof aux);
}

void VectorStore::prepare_query(const float* q, QueryCtx& ctx) const {
  std::vector<float> buf;
  const float* p = prepare_input(q, buf);
  ctx.vec.assign(p, p + dim_);
  if (dtype_ != DType::Int8) return;
  ctx.code.resize(dim_);
  if (space_ == Space::L2) {
    float s = kernels::quantize_i8(ctx.vec.data(), centre_.data(), dim_, ctx.code.data());
    ctx.base = float(l2sq_f64(ctx.vec.data(), centre_.data(), dim_));
    ctx.factor = -2.f * s;
  } else {
    float s = kernels::quantize_i8(ctx.vec.data(), nullptr, dim_, ctx.code.data());
    ctx.base = -float(dot_f64(ctx.vec.data(), centre_.data(), dim_));
    ctx.factor = -s;
  }
}

float VectorStore::exact_distance(const QueryCtx& ctx, uint32_t id) const {
  const float* x = original(id);
  if (!x) return distance(ctx, id);
  return space_ == Space::L2 ? kt_->l2sq_f32(ctx.vec.data(), x, dim_) : -kt_->dot_f32(ctx.vec.data(), x, dim_);
}

float VectorStore::ip_norm(uint32_t id) const { return std::sqrt(std::max(0.f, -distance_between(id, id))); }

float VectorStore::distance_between(uint32_t a, uint32_t b) const {
  if (dtype_ == DType::Int8) {
    const float d = float(kt_->dot_i8(code_i8(a), code_i8(b), dim_)) * scale(a) * scale(b);
    if (space_ == Space::L2) return aux(a) + aux(b) - 2.f * d;
    return -(centre_norm2_ + aux(a) + aux(b) + d);
  }
  return space_ == Space::L2 ? kt_->l2sq_f32(code_f32(a), code_f32(b), dim_)
                             : -kt_->dot_f32(code_f32(a), code_f32(b), dim_);
}

void VectorStore::decode(uint32_t id, float* out) const {
  if (dtype_ == DType::Int8) {
    if (const float* x = original(id)) {
      std::memcpy(out, x, dim_ * sizeof(float));
      return;
    }
    kernels::dequantize_i8(code_i8(id), scale(id), centre_.data(), dim_, out);
  } else {
    std::memcpy(out, code_f32(id), dim_ * sizeof(float));
  }
}

bool VectorStore::find(uint64_t ext, uint32_t& id) const {
  std::lock_guard<std::mutex> g(ids_mu_);
  auto it = map_.find(ext);
  if (it == map_.end()) return false;
  id = it->second;
  return true;
}

uint32_t VectorStore::allocate(const uint64_t* ext, size_t n) {
  if (!owned_) throw std::runtime_error("read-only memory-mapped index: cannot add items");
  std::lock_guard<std::mutex> g(ids_mu_);
  const size_t first = count_.load(std::memory_order_relaxed);
  if (first + n > capacity_) throw std::runtime_error("The number of elements exceeds the specified limit");
  if (first + n > size_t(UINT32_MAX)) throw std::runtime_error("more than 2^32 - 1 elements");
  size_t foreign = 0;
  for (size_t i = 0; i < n; ++i) {
    ext_[first + i] = ext[i];
    map_[ext[i]] = uint32_t(first + i);
    foreign += ext[i] != first + i;
  }
  foreign_ids_.fetch_add(foreign, std::memory_order_release);  // before the new count is published
  count_.store(first + n, std::memory_order_release);
  return uint32_t(first);
}

void VectorStore::rebind(uint32_t id, uint64_t new_ext) {
  std::lock_guard<std::mutex> g(ids_mu_);
  map_.erase(ext_[id]);
  if (new_ext != id && ext_[id] == id) foreign_ids_.fetch_add(1, std::memory_order_release);
  if (new_ext == id && ext_[id] != id) foreign_ids_.fetch_sub(1, std::memory_order_release);
  ext_[id] = new_ext;
  map_[new_ext] = id;
}

void VectorStore::restore(size_t count, const uint64_t* ext) {
  std::lock_guard<std::mutex> g(ids_mu_);
  map_.clear();
  map_.reserve(count);
  size_t deleted = 0, foreign = 0;
  for (size_t i = 0; i < count; ++i) {
    ext_[i] = ext[i];
    map_[ext[i]] = uint32_t(i);
    if (header(uint32_t(i)) & kDeletedBit) ++deleted;
    foreign += ext[i] != i;
  }
  if (sketches_) derive_sketches(count);  // not saved: derived from the codes on load
  foreign_ids_.store(foreign, std::memory_order_release);
  count_.store(count, std::memory_order_release);
  deleted_.store(deleted);
}

void VectorStore::attach_readonly(char* slabs, float* floats, size_t count, const uint64_t* ext) {
  free_buffers();
  owned_ = false;
  data_ = slabs;
  floats_ = keep_float_ ? floats : nullptr;
  capacity_ = count;
  ext_.assign(count, 0);
  restore(count, ext);
}

size_t VectorStore::memory_bytes() const {
  size_t b = owned_ ? capacity_ * stride_ + (floats_ ? capacity_ * dim_ * sizeof(float) : 0) : 0;
  b += ext_.capacity() * sizeof(uint64_t) + centre_.capacity() * sizeof(float);
  if (sketches_) b += sketches_->memory_bytes();
  // unordered_map: one node (key, value, next pointer, cached hash) + one bucket pointer per element.
  b += map_.size() * 32 + map_.bucket_count() * sizeof(void*);
  return b;
}

}  // namespace medretrieve::index
