// Reusable "visited" sets for graph search: one u16 tag per element and a
// current tag, so clearing is O(1) (bump the tag) instead of O(n) per query.
// Lists are pooled; a search borrows one and gives it back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace medretrieve::index {

class VisitedList {
 public:
  explicit VisitedList(size_t n) : tags_(n, 0) {}
  // Starts a new search: every element reads as unvisited.
  void reset() {
    if (++tag_ == 0) {
      std::fill(tags_.begin(), tags_.end(), uint16_t(0));
      tag_ = 1;
    }
  }
  bool visited(uint32_t id) const { return tags_[id] == tag_; }
  // Marks id; returns true when it was already visited.
  bool test_and_set(uint32_t id) {
    if (tags_[id] == tag_) return true;
    tags_[id] = tag_;
    return false;
  }
  // The same without a branch (the tag is stored either way): graph search
  // marks every neighbour it meets, and whether one was seen before is a
  // coin flip the branch predictor loses about a third of the time.
  bool seen_then_mark(uint32_t id) {
    const bool seen = tags_[id] == tag_;
    tags_[id] = tag_;
    return seen;
  }
  size_t size() const { return tags_.size(); }

 private:
  std::vector<uint16_t> tags_;
  uint16_t tag_ = 0;
};

class VisitedPool {
 public:
  explicit VisitedPool(size_t n) : n_(n) {}

  class Lease {
   public:
    Lease(VisitedPool* pool, std::unique_ptr<VisitedList> list) : pool_(pool), list_(std::move(list)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (list_) pool_->give_back(std::move(list_));
    }
    VisitedList& operator*() { return *list_; }
    VisitedList* operator->() { return list_.get(); }

   private:
    VisitedPool* pool_;
    std::unique_ptr<VisitedList> list_;
  };

  Lease borrow() {
    std::unique_ptr<VisitedList> list;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!free_.empty()) {
        list = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!list || list->size() != n_) list = std::make_unique<VisitedList>(n_);
    list->reset();
    return Lease(this, std::move(list));
  }

  // Only while no search runs (the index holds its exclusive lock).
  void resize(size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    n_ = n;
    free_.clear();
  }

 private:
  void give_back(std::unique_ptr<VisitedList> list) {
    std::lock_guard<std::mutex> g(mu_);
    if (list->size() == n_) free_.push_back(std::move(list));
  }
  std::mutex mu_;
  size_t n_;
  std::vector<std::unique_ptr<VisitedList>> free_;
};

}  // namespace medretrieve::index
