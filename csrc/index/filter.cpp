#include "index/filter.h"

#include "kernels/distances.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace medretrieve::index {

std::vector<Candidate> exact_topk(const VectorStore& store, const QueryCtx& ctx, const ElementFilter& filter,
                                  const uint32_t* ids, size_t n, size_t k, bool use_exact) {
  if (!ids && !use_exact) {
    std::vector<Candidate> out;
    exact_topk_scan(store, &ctx, 1, filter, k, &out);
    return out;
  }
  TopK top(k);
  // Per-element work the scan can skip: the deletion / label test when there is
  // nothing to exclude, and software prefetch on a sequential scan (the hardware
  // prefetcher follows it; the extra instructions made a 16-d scan ~20% slower).
  const bool check_stored = filter.checks_stored();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = ids ? ids[i] : uint32_t(i);
    if (ids && i + 4 < n) store.prefetch(ids[i + 4]);
    if (check_stored && !filter.stored_ok(id)) continue;
    top.offer(use_exact ? store.exact_distance(ctx, id) : store.distance(ctx, id), id, filter);
  }
  return top.take_sorted();
}

void exact_topk_scan(const VectorStore& store, const QueryCtx* ctxs, size_t nq, const ElementFilter& filter, size_t k,
                     std::vector<Candidate>* out, bool hold_predicate) {
  constexpr size_t kBlockBytes = 16 << 10, kMaxBlock = 256;
  const size_t block = std::clamp<size_t>(kBlockBytes / store.stride(), 16, kMaxBlock);
  const bool check_stored = filter.checks_stored();
  std::vector<TopK> tops(nq, TopK(k));
  float d[kMaxBlock];
  const size_t n = store.count();
  const bool hold = hold_predicate && filter.fn && filter.fn->hold;
  for (size_t first = 0; first < n; first += block) {
    const size_t len = std::min(block, n - first);
    std::shared_ptr<void> held;  // taken at the block's first predicate call, dropped after the block
    for (size_t q = 0; q < nq; ++q) {
      store.distances(ctxs[q], uint32_t(first), len, d);
      TopK& top = tops[q];
      for (size_t j = 0; j < len; ++j) {
        // Most rows lose to the bound: test it before anything else.
        if (!(d[j] < top.bound())) continue;
        const uint32_t id = uint32_t(first + j);
        if (check_stored && !filter.stored_ok(id)) continue;
        if (hold && !held) held = filter.fn->hold();
        top.offer(d[j], id, filter);
      }
    }
  }
  for (size_t q = 0; q < nq; ++q) out[q] = tops[q].take_sorted();
}

std::vector<uint32_t> AllowedRows::ids() const {
  std::vector<uint32_t> out;
  ids(out);
  return out;
}

void AllowedRows::ids(std::vector<uint32_t>& out) const {
  if (!listed.empty() || count == 0) {
    out.assign(listed.begin(), listed.end());
    return;
  }
  // Grown only (a scan's list is kept from search to search: zeroing it whole each time cost as much as the ids).
  if (out.size() < count + kernels::kSetBitIdsSlack) out.resize(count + kernels::kSetBitIdsSlack);
  out.resize(kernels::active().set_bit_ids(words, n_words, out.data()));
}

AllowedRows AllowedRows::from_external(const VectorStore& store, const uint64_t* ext_words, size_t n_words) {
  const size_t slots = store.count(), slot_words = (slots + 63) / 64;
  const kernels::KernelTable& kt = kernels::active();
  AllowedRows rows;
  if (store.ids_are_slots()) {  // the caller's bitset is over the slots already: view it, cut at the count
    rows.n_words = std::min(n_words, slot_words);
    const uint64_t past_slots = slots % 64 && rows.n_words == slot_words ? ~((uint64_t(1) << (slots % 64)) - 1) : 0;
    if (!(past_slots && (ext_words[rows.n_words - 1] & past_slots))) {
      rows.words = ext_words;
    } else {  // bits set past the slots (ids not in the index): a copy with the last word cut
      rows.owned.assign(ext_words, ext_words + rows.n_words);
      rows.owned.back() &= ~past_slots;
      rows.words = rows.owned.data();
    }
  } else {
    rows.owned.assign(slot_words, 0);
    const auto set_slot = [&rows](uint32_t id) { rows.owned[id >> 6] |= uint64_t(1) << (id & 63); };
    // A hash look-up costs several sequential reads of an external id: look the
    // set ids up when they are few, else test every slot's external id.
    constexpr size_t kReadsPerLookup = 8;
    if (kt.count_bits(ext_words, n_words) * kReadsPerLookup < slots) {
      for (size_t w = 0; w < n_words; ++w)
        for (uint64_t bits = ext_words[w]; bits; bits &= bits - 1) {
          uint32_t id;
          if (store.find(uint64_t(w * 64 + __builtin_ctzll(bits)), id)) set_slot(id);
        }
    } else {
      const uint64_t limit = uint64_t(n_words) * 64;
      for (size_t i = 0; i < slots; ++i) {
        const uint64_t ext = store.ext_id(uint32_t(i));
        if (ext < limit && (ext_words[ext >> 6] >> (ext & 63) & 1)) set_slot(uint32_t(i));
      }
    }
    rows.words = rows.owned.data();
    rows.n_words = rows.owned.size();
  }
  rows.count = kt.count_bits(rows.words, rows.n_words);
  if (double(rows.count) <= kListedShare * double(slots)) rows.listed = rows.ids();
  return rows;
}

std::vector<uint32_t> element_labels(const VectorStore& store, const LabelTable& table, uint32_t id) {
  if (!store.labels_exact(id)) return table.side_labels(id);
  std::vector<uint32_t> out;
  const uint64_t sig = store.signature(id);
  for (uint32_t b = 0; b < 64; ++b)
    if (sig >> b & 1) out.push_back(b);
  return out;
}

void assign_labels(VectorStore& store, LabelTable& table, uint32_t id, const std::vector<uint32_t>& labels) {
  const std::vector<uint32_t> old = element_labels(store, table, id);
  table.assign(id, old, labels);
  store.set_signature(id, label_signature(labels), labels_all_below_64(labels));
}

void check_k(size_t k, size_t count, const char* name) {
  const size_t limit = std::max(count, kMinMaxK);
  if (k > limit)
    throw std::invalid_argument(std::string(name) + "=" + std::to_string(k) + " is too large: at most max(stored elements, " +
                                std::to_string(kMinMaxK) + ") = " + std::to_string(limit) +
                                " results per query (the index holds " + std::to_string(count) +
                                " elements; results past them are padding)");
}

size_t result_cells(size_t nq, size_t k) {
  size_t cells;
  if (__builtin_mul_overflow(nq, k, &cells) || cells > std::numeric_limits<size_t>::max() / sizeof(int64_t))
    throw std::invalid_argument("the result of " + std::to_string(nq) + " queries x k=" + std::to_string(k) +
                                " does not fit in memory");
  return cells;
}

void write_row(const VectorStore& store, const std::vector<Candidate>& found, size_t k, int64_t* ids, float* scores) {
  const size_t n = std::min(k, found.size());
  for (size_t j = 0; j < n; ++j) {
    ids[j] = int64_t(store.ext_id(found[j].second));
    scores[j] = -found[j].first;
  }
  for (size_t j = n; j < k; ++j) {
    ids[j] = -1;
    scores[j] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace medretrieve::index
