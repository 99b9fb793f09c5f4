#include "index/sketch.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace medretrieve::index {

void SignSketches::reserve(size_t capacity, size_t keep) {
  std::unique_ptr<uint64_t[], FreeDeleter> bits(
      reinterpret_cast<uint64_t*>(alloc_zeroed(capacity * stride() * sizeof(uint64_t))));
  const size_t kept = std::min({keep, capacity, capacity_}) * stride();
  if (kept) std::memcpy(bits.get(), bits_.get(), kept * sizeof(uint64_t));
  bits_ = std::move(bits);
  capacity_ = capacity;
}

void SignSketches::set(uint32_t id, const int8_t* code, float scale, size_t dim) {
  uint64_t* out = bits_.get() + size_t(id) * stride();
  std::fill(out, out + stride(), 0);
  int64_t l1 = 0, l2 = 0;
  for (size_t d = 0; d < dim; ++d) {
    out[d >> 6] |= uint64_t(code[d] > 0) << (d & 63);
    l1 += std::abs(int(code[d]));
    l2 += int64_t(code[d]) * code[d];
  }
  const float row_scale = l1 ? float(double(scale) * double(l2) / double(l1)) : 0.f;
  std::memcpy(out + words_, &row_scale, sizeof row_scale);
}

}  // namespace medretrieve::index
