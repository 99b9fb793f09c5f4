// RRF and score fusion over a small open-addressing hash table; see rrf.h.
#include "fusion/rrf.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace medretrieve::fusion {
namespace {

// id -> dense entry number. Linear probing over a power-of-two table at most
// half full, sized once from the total input length (no rehashing).
class IdTable {
 public:
  explicit IdTable(size_t max_ids) {
    size_t cap = 16;
    while (cap < 2 * max_ids) cap <<= 1;
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    slots_.assign(cap, -1);
    keys_.resize(cap);
  }
  // Returns the entry number of `id` and whether it was just inserted.
  std::pair<int32_t, bool> find_or_insert(int64_t id, int32_t next) {
    size_t h = size_t((uint64_t(id) * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
    while (true) {
      const int32_t s = slots_[h];
      if (s < 0) {
        slots_[h] = next;
        keys_[h] = id;
        return {next, true};
      }
      if (keys_[h] == id) return {s, false};
      h = (h + 1) & mask_;
    }
  }

 private:
  size_t mask_;
  int shift_;
  std::vector<int32_t> slots_;
  std::vector<int64_t> keys_;
};

// Weights and k are checked where users pass them (the bindings); debug asserts here.
void check_weights(const double* weights, size_t n) {
  for (size_t l = 0; weights && l < n; ++l) assert(std::isfinite(weights[l]) && weights[l] >= 0);
  (void)weights, (void)n;
}

template <class Less>
void order_and_cut(std::vector<int32_t>& idx, size_t top_n, Less less) {
  if (top_n > 0 && top_n < idx.size()) {
    std::partial_sort(idx.begin(), idx.begin() + top_n, idx.end(), less);
    idx.resize(top_n);
  } else {
    std::sort(idx.begin(), idx.end(), less);
  }
}

// The fused list in the given order: ids[e], float(score[e]) for each entry e.
Fused gather(const std::vector<int32_t>& idx, const std::vector<int64_t>& ids, const std::vector<double>& score) {
  Fused out;
  out.ids.reserve(idx.size());
  out.scores.reserve(idx.size());
  for (int32_t e : idx) {
    out.ids.push_back(ids[e]);
    out.scores.push_back(float(score[e]));
  }
  return out;
}

}  // namespace

Fused rrf(const std::vector<IdList>& lists, double k, const double* weights, size_t top_n) {
  assert(std::isfinite(k) && k >= 0);
  check_weights(weights, lists.size());
  size_t total = 0;
  for (const IdList& l : lists) {
    if (l.size > 0 && !l.ids) throw std::invalid_argument("rrf: null id list");
    total += l.size;
  }
  if (total > size_t(std::numeric_limits<int32_t>::max() / 2))
    throw std::invalid_argument("rrf: too many ids (over 2^30)");

  std::vector<int64_t> ids;
  std::vector<double> score;
  std::vector<int64_t> best_rank;
  std::vector<int32_t> last_list;  // last list that contributed: skips repeats inside a list
  ids.reserve(total);
  score.reserve(total);
  best_rank.reserve(total);
  last_list.reserve(total);
  IdTable table(total);
  for (size_t l = 0; l < lists.size(); ++l) {
    const double w = weights ? weights[l] : 1.0;
    const IdList& list = lists[l];
    for (size_t pos = 0; pos < list.size; ++pos) {
      const int64_t rank = int64_t(pos) + 1;
      auto [e, fresh] = table.find_or_insert(list.ids[pos], int32_t(ids.size()));
      if (fresh) {
        ids.push_back(list.ids[pos]);
        score.push_back(w / (k + double(rank)));
        best_rank.push_back(rank);
        last_list.push_back(int32_t(l));
      } else if (last_list[e] != int32_t(l)) {
        score[e] += w / (k + double(rank));
        best_rank[e] = std::min(best_rank[e], rank);
        last_list[e] = int32_t(l);
      }
    }
  }
  std::vector<int32_t> idx(ids.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i);
  order_and_cut(idx, top_n, [&](int32_t a, int32_t b) {
    if (score[a] != score[b]) return score[a] > score[b];
    if (best_rank[a] != best_rank[b]) return best_rank[a] < best_rank[b];
    return ids[a] < ids[b];
  });
  return gather(idx, ids, score);
}

Fused fuse_scores(const std::vector<ScoredList>& lists, ScoreNorm norm, const double* weights, size_t top_n) {
  check_weights(weights, lists.size());
  size_t total = 0;
  for (size_t l = 0; l < lists.size(); ++l) {
    const ScoredList& s = lists[l];
    if (s.size > 0 && (!s.ids || !s.scores)) throw std::invalid_argument("fuse_scores: null list");
    for (size_t i = 0; i < s.size; ++i)
      if (!std::isfinite(s.scores[i]))
        throw std::invalid_argument("fuse_scores: score " + std::to_string(i) + " of list " + std::to_string(l) +
                                    " is not finite");
    total += s.size;
  }
  if (total > size_t(std::numeric_limits<int32_t>::max() / 2))
    throw std::invalid_argument("fuse_scores: too many ids (over 2^30)");

  // Pass 1: the distinct ids (in first-seen order) and, per list, each id's
  // best raw score. norm_val[e * L + l] holds list l's value for entry e.
  const size_t L = lists.size();
  IdTable table(total);
  std::vector<int64_t> ids;
  ids.reserve(total);
  std::vector<std::vector<std::pair<int32_t, double>>> per_list(L);  // (entry, best score)
  std::vector<int32_t> slot_in_list;  // entry -> index into per_list[l] (reset per list)
  for (size_t l = 0; l < L; ++l) {
    const ScoredList& s = lists[l];
    per_list[l].reserve(s.size);
    for (size_t i = 0; i < s.size; ++i) {
      auto [e, fresh] = table.find_or_insert(s.ids[i], int32_t(ids.size()));
      if (fresh) {
        ids.push_back(s.ids[i]);
        slot_in_list.push_back(-1);
      }
      if (slot_in_list[e] < 0) {
        slot_in_list[e] = int32_t(per_list[l].size());
        per_list[l].emplace_back(e, double(s.scores[i]));
      } else {
        auto& best = per_list[l][slot_in_list[e]].second;
        best = std::max(best, double(s.scores[i]));
      }
    }
    for (auto& pe : per_list[l]) slot_in_list[pe.first] = -1;
  }

  const size_t E = ids.size();
  std::vector<double> fused(E, 0.0);
  std::vector<double> value(E);
  for (size_t l = 0; l < L; ++l) {
    const auto& pl = per_list[l];
    const double w = weights ? weights[l] : 1.0;
    double missing = 0.0;
    double lo = 0, hi = 0, mean = 0, sd = 0;
    if (!pl.empty()) {
      lo = hi = pl[0].second;
      for (auto& pe : pl) {
        lo = std::min(lo, pe.second);
        hi = std::max(hi, pe.second);
        mean += pe.second;
      }
      mean /= double(pl.size());
      for (auto& pe : pl) sd += (pe.second - mean) * (pe.second - mean);
      sd = std::sqrt(sd / double(pl.size()));
      if (norm == ScoreNorm::ZScore) missing = sd > 0 ? (lo - mean) / sd : 0.0;
    }
    std::fill(value.begin(), value.end(), missing);
    for (auto& pe : pl) {
      double v;
      if (norm == ScoreNorm::MinMax)
        v = hi > lo ? (pe.second - lo) / (hi - lo) : 1.0;
      else
        v = sd > 0 ? (pe.second - mean) / sd : 0.0;
      value[pe.first] = v;
    }
    for (size_t e = 0; e < E; ++e) fused[e] += w * value[e];
  }

  std::vector<int32_t> idx(E);
  for (size_t i = 0; i < E; ++i) idx[i] = int32_t(i);
  order_and_cut(idx, top_n, [&](int32_t a, int32_t b) {
    if (fused[a] != fused[b]) return fused[a] > fused[b];
    return ids[a] < ids[b];
  });
  return gather(idx, ids, fused);
}

}  // namespace medretrieve::fusion
