// The pools layer-0 searches expand from. SearchPool, the result list of an
// unfiltered layer-0 search: the ef closest elements
// found so far, sorted by distance, each flagged once expanded (DiskANN's
// neighbour pool). It replaces hnswlib's two heaps: a candidate the
// candidate heap holds beyond these ef is farther than the ef-th result, and
// the search stops at the first such candidate, so it is never expanded.
// An insertion is a binary search and a move of at most ef 12-byte items.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace medretrieve::index {

// A sorted list of (distance, id, expanded) items and the cursor at its
// closest unexpanded one: what both pools below expand from.
template <class Item>
class SortedPool {
 public:
  bool has_unexpanded() const { return cursor_ < items_.size(); }
  // The closest element not yet expanded (has_unexpanded() must hold); marks it expanded.
  uint32_t expand_next() {
    Item& item = items_[cursor_];
    item.expanded = true;
    while (cursor_ < items_.size() && items_[cursor_].expanded) ++cursor_;
    return item.id;
  }
  // The element expand_next() would return now, or none.
  bool peek_next(uint32_t& id) const {
    if (cursor_ >= items_.size()) return false;
    id = items_[cursor_].id;
    return true;
  }

 protected:
  // Ties (exact duplicates) go to the lower id, as std::pair orders Candidates elsewhere.
  static bool closer(const Item& a, const Item& b) {
    return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
  }
  // Inserts in order; returns the position.
  size_t insert_sorted(const Item& item) {
    const auto at = std::upper_bound(items_.begin(), items_.end(), item, closer);
    const size_t pos = size_t(at - items_.begin());
    items_.insert(at, item);
    if (pos < cursor_) cursor_ = pos;
    return pos;
  }
  void clear() {
    cursor_ = 0;
    items_.clear();
  }
  size_t cursor_ = 0;
  std::vector<Item> items_;
};

struct PoolItem {
  float distance;
  uint32_t id;
  bool expanded;
};

class SearchPool : public SortedPool<PoolItem> {
 public:
  explicit SearchPool(size_t capacity) { reset(capacity); }
  // Empties the pool for a new search, keeping its memory.
  void reset(size_t capacity) {
    capacity_ = std::max<size_t>(capacity, 1);
    clear();
    items_.reserve(capacity_);
  }

  // Inserts (distance, id) when it is among the `capacity` closest so far;
  // returns whether it was.
  bool insert(float distance, uint32_t id) {
    const PoolItem item{distance, id, false};
    if (items_.size() == capacity_) {
      if (!closer(item, items_.back())) return false;
      items_.pop_back();
    }
    insert_sorted(item);
    return true;
  }
  size_t size() const { return items_.size(); }
  float distance(size_t i) const { return items_[i].distance; }
  uint32_t id(size_t i) const { return items_[i].id; }

 private:
  size_t capacity_ = 1;
};

// The result list of a filtered (or deletion-screened) layer-0 search, as
// hnswlib's two heaps with a filter: every element closer than the ef-th
// allowed one found so far is a candidate to expand, allowed or not; the
// allowed ones are the results. One sorted list holds both: it is cut after
// its ef-th allowed element (what lies beyond would never be expanded), so
// it grows past ef only while fewer than ef allowed elements are known.
struct ScreenedItem {
  float distance;
  uint32_t id;
  bool expanded;
  bool allowed;
};

class ScreenedPool : public SortedPool<ScreenedItem> {
 public:
  void reset(size_t ef) {
    ef_ = std::max<size_t>(ef, 1);
    allowed_ = 0;
    clear();
  }
  // Whether an element at this distance would enter (test before the filter: a predicate may be costly).
  bool admits(float distance) const { return allowed_ < ef_ || distance < items_.back().distance; }
  void insert(float distance, uint32_t id, bool allowed) {
    if (!admits(distance)) return;
    insert_sorted({distance, id, false, allowed});
    if (allowed && ++allowed_ > ef_) {  // drop the (ef+1)-th allowed element
      while (!items_.back().allowed) items_.pop_back();
      items_.pop_back();
      --allowed_;
    }
    if (allowed_ == ef_)  // and whatever lies behind the ef-th
      while (!items_.back().allowed) items_.pop_back();
    if (cursor_ > items_.size()) cursor_ = items_.size();
  }
  // The allowed elements, closest first (at most ef).
  template <class Out>
  void take_allowed(Out& out) const {
    out.clear();
    for (const ScreenedItem& item : items_)
      if (item.allowed) out.emplace_back(item.distance, item.id);
  }

 private:
  size_t ef_ = 1, allowed_ = 0;
};

}  // namespace medretrieve::index
