// Per-element label sets (small integer sets such as section ids).
//
// Fast path: every element's slab carries a 64-bit signature (bit label & 63
// for each of its labels) and a flag saying whether all its labels are < 64.
// When the flag is set the signature IS the exact set and nothing else is
// read; otherwise the exact list lives in a side table here, consulted only
// when the signature cannot decide. Posting lists (label -> internal ids)
// let a filtered search count and enumerate the allowed elements, which is
// how it decides between exact search over the subset and graph search.
#pragma once

#include <cstddef>
#include <cstdint>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "common/shared_mutex.h"

namespace medretrieve::index {

// A search-time label restriction: keep elements having ANY of `labels`.
struct LabelQuery {
  std::vector<uint32_t> labels;  // sorted, unique
  uint64_t sig_any = 0;          // bit (l & 63) for every query label
  uint64_t sig_low = 0;          // bit l for query labels l < 64 only
  static LabelQuery make(std::vector<uint32_t> labels);
};

// Sorted unique copy of a label list.
std::vector<uint32_t> normalise_labels(std::vector<uint32_t> labels);
uint64_t label_signature(const std::vector<uint32_t>& labels);
bool labels_all_below_64(const std::vector<uint32_t>& labels);

class LabelTable {
 public:
  // Replaces the labels of `id`: `old_labels` (what it had, possibly empty)
  // leave the posting lists, `labels` (sorted unique) enter them.
  void assign(uint32_t id, const std::vector<uint32_t>& old_labels, const std::vector<uint32_t>& labels);
  // Exact labels of an element whose signature is not exact (side table).
  std::vector<uint32_t> side_labels(uint32_t id) const;
  // Exact test for an element whose signature is not exact.
  bool side_matches(uint32_t id, const LabelQuery& q) const;
  // Sum of the query labels' posting sizes: an upper bound on the allowed count.
  size_t upper_bound(const LabelQuery& q) const;
  // Appends the ids in the query labels' posting lists (an id may repeat).
  void collect(const LabelQuery& q, std::vector<uint32_t>& out) const;
  // Every (id, labels) of the side table, for persistence.
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> side_entries() const;
  size_t memory_bytes() const;
  void clear();

 private:
  mutable SharedMutex mu_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> postings_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> side_;
};

}  // namespace medretrieve::index
