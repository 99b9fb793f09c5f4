#include "index/labels.h"

#include <algorithm>
#include <mutex>

namespace medretrieve::index {

std::vector<uint32_t> normalise_labels(std::vector<uint32_t> labels) {
  std::sort(labels.begin(), labels.end());
  labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
  return labels;
}

uint64_t label_signature(const std::vector<uint32_t>& labels) {
  uint64_t sig = 0;
  for (uint32_t l : labels) sig |= uint64_t(1) << (l & 63);
  return sig;
}

bool labels_all_below_64(const std::vector<uint32_t>& labels) {
  return std::all_of(labels.begin(), labels.end(), [](uint32_t l) { return l < 64; });
}

LabelQuery LabelQuery::make(std::vector<uint32_t> labels) {
  LabelQuery q;
  q.labels = normalise_labels(std::move(labels));
  q.sig_any = label_signature(q.labels);
  for (uint32_t l : q.labels)
    if (l < 64) q.sig_low |= uint64_t(1) << l;
  return q;
}

void LabelTable::assign(uint32_t id, const std::vector<uint32_t>& old_labels, const std::vector<uint32_t>& labels) {
  std::unique_lock<SharedMutex> g(mu_);
  for (uint32_t l : old_labels) {
    auto it = postings_.find(l);
    if (it == postings_.end()) continue;
    auto& ids = it->second;
    auto pos = std::find(ids.begin(), ids.end(), id);
    if (pos != ids.end()) {
      *pos = ids.back();
      ids.pop_back();
    }
    if (ids.empty()) postings_.erase(it);
  }
  for (uint32_t l : labels) postings_[l].push_back(id);
  if (labels_all_below_64(labels))
    side_.erase(id);
  else
    side_[id] = labels;
}

std::vector<uint32_t> LabelTable::side_labels(uint32_t id) const {
  std::shared_lock<SharedMutex> g(mu_);
  auto it = side_.find(id);
  return it == side_.end() ? std::vector<uint32_t>() : it->second;
}

bool LabelTable::side_matches(uint32_t id, const LabelQuery& q) const {
  std::shared_lock<SharedMutex> g(mu_);
  auto it = side_.find(id);
  if (it == side_.end()) return false;
  const auto& a = it->second;
  // Both sorted: a linear merge finds any common label.
  size_t i = 0, j = 0;
  while (i < a.size() && j < q.labels.size()) {
    if (a[i] == q.labels[j]) return true;
    if (a[i] < q.labels[j]) ++i; else ++j;
  }
  return false;
}

size_t LabelTable::upper_bound(const LabelQuery& q) const {
  std::shared_lock<SharedMutex> g(mu_);
  size_t n = 0;
  for (uint32_t l : q.labels) {
    auto it = postings_.find(l);
    if (it != postings_.end()) n += it->second.size();
  }
  return n;
}

void LabelTable::collect(const LabelQuery& q, std::vector<uint32_t>& out) const {
  std::shared_lock<SharedMutex> g(mu_);
  for (uint32_t l : q.labels) {
    auto it = postings_.find(l);
    if (it != postings_.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

std::vector<std::pair<uint32_t, std::vector<uint32_t>>> LabelTable::side_entries() const {
  std::shared_lock<SharedMutex> g(mu_);
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> out(side_.begin(), side_.end());
  std::sort(out.begin(), out.end());
  return out;
}

size_t LabelTable::memory_bytes() const {
  std::shared_lock<SharedMutex> g(mu_);
  size_t b = 0;
  for (const auto& [l, ids] : postings_) b += 48 + ids.capacity() * sizeof(uint32_t);
  for (const auto& [id, ls] : side_) b += 48 + ls.capacity() * sizeof(uint32_t);
  return b;
}

void LabelTable::clear() {
  std::unique_lock<SharedMutex> g(mu_);
  postings_.clear();
  side_.clear();
}

}  // namespace medretrieve::index
