#include "index/sketch_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "kernels/distances.h"

namespace medretrieve::index {

namespace {

size_t rerank_count(size_t k, size_t ef) { return kSketchRerankPerResult * std::max(k, ef); }

// An estimate and its row as one integer ordered as the estimate, then the row: the selections below compare
// integers (as (float, id) pairs they took 6% of a 10% correlated query on the BioASQ passages). Estimates are
// finite: the high 32 bits are the float's bits, sign flipped for positives and all flipped for negatives.
uint64_t estimate_key(float estimate, uint32_t id) {
  uint32_t u;
  std::memcpy(&u, &estimate, sizeof u);
  u = u & 0x80000000u ? ~u : u | 0x80000000u;
  return uint64_t(u) << 32 | id;
}
float key_estimate(uint64_t key) {
  uint32_t u = uint32_t(key >> 32);
  u = u & 0x80000000u ? u & 0x7FFFFFFFu : ~u;
  float estimate;
  std::memcpy(&estimate, &u, sizeof estimate);
  return estimate;
}
uint32_t key_id(uint64_t key) { return uint32_t(key); }

}  // namespace

bool sketch_scan_applies(const VectorStore& store, const ElementFilter& filter, size_t n, size_t k, size_t ef) {
  return store.sketches() != nullptr && !filter.fn && n >= kSketchMinListPerRerank * rerank_count(k, ef);
}

double scan_cost(const VectorStore& store, const ElementFilter& filter, size_t n, size_t k, size_t ef) {
  if (!sketch_scan_applies(store, filter, n, k, ef)) return double(n);
  return double(n) * kSketchRowCost + double(rerank_count(k, ef));
}

std::vector<Candidate> sketch_topk(const VectorStore& store, const QueryCtx& ctx, const ElementFilter& filter,
                                   const uint32_t* ids, size_t n, size_t k, size_t ef, bool use_exact) {
  if (n == 0) return {};
  const SignSketches& sketches = *store.sketches();
  const size_t words = sketches.words();
  std::vector<int8_t> q(64 * words, 0);  // the query's code, zero past the dimension
  std::copy(ctx.code.begin(), ctx.code.end(), q.begin());
  const kernels::KernelTable& kt = kernels::active();
  const size_t keep = std::min(n, rerank_count(k, ef));
  constexpr size_t kBlock = 256;  // rows a kernel call scores
  float estimates[kBlock];
  const auto score = [&](const uint32_t* block, size_t len) {
    kt.sketch_estimates(q.data(), sketches.data(), sketches.stride(), words, block, len, estimates);
  };
  // The best estimates so far, (estimate, id): filled to kBestSlack times `keep`, then cut back to the best `keep`,
  // whose worst is the floor a row must beat. The first floor comes from every kFloorEvery-th block: the estimate
  // about 3 * keep rows would beat, were those blocks like the rest. Without it, the first rows all entered the
  // list and a scan of 11k rows cut it 2-3 times (a third of its time; with it about 1,200 rows enter, no cut; with
  // 2 * keep, 1 scan in 100 had fewer than `keep` above the floor and read its rows twice, below).
  constexpr size_t kBestSlack = 4, kFloorEvery = 16;
  float floor = -std::numeric_limits<float>::infinity();
  const size_t sampled = n / (kBlock * kFloorEvery) * kBlock, rank = 3 * keep * sampled / n;
  if (rank >= k) {
    std::vector<float> sample(sampled);
    for (size_t from = 0; from < sampled; from += kBlock) {
      score(ids + from * kFloorEvery, kBlock);
      std::copy(estimates, estimates + kBlock, sample.begin() + ptrdiff_t(from));
    }
    std::nth_element(sample.begin(), sample.begin() + ptrdiff_t(rank - 1), sample.end(), std::greater<float>());
    floor = std::nextafter(sample[rank - 1], -std::numeric_limits<float>::infinity());  // the rank rows pass
  }
  std::vector<uint64_t> best(kBestSlack * keep);  // estimate_key
  size_t held = 0;
  const auto cut = [&] {
    std::nth_element(best.begin(), best.begin() + ptrdiff_t(keep - 1), best.begin() + ptrdiff_t(held),
                     std::greater<uint64_t>());
    held = keep;
    return key_estimate(best[keep - 1]);
  };
  const bool check_stored = filter.checks_stored();
  const auto pass = [&] {
    for (size_t first = 0; first < n; first += kBlock) {
      const size_t len = std::min(kBlock, n - first);
      const uint32_t* block = ids + first;
      score(block, len);
      // The rows over the floor, listed without a branch (about 1 row in 10 passes: a branch per row mispredicted
      // on each); a floor raised by a cut takes effect from the next block.
      uint16_t over[kBlock];
      size_t n_over = 0;
      for (size_t j = 0; j < len; ++j) {
        over[n_over] = uint16_t(j);
        n_over += estimates[j] > floor;
      }
      for (size_t i = 0; i < n_over; ++i) {
        const size_t j = over[i];
        // Tested only for rows that would be kept: the deletion bit and labels lie in the slab the sketch spares.
        if (check_stored && !filter.stored_ok(block[j])) continue;
        best[held++] = estimate_key(estimates[j], block[j]);
        if (held == best.size()) floor = cut();
      }
    }
  };
  pass();
  if (held < keep && floor > -std::numeric_limits<float>::infinity()) {
    // Fewer rows than kept beat the sample's floor: rows above it failed the filter (the sample tests no deletion
    // or label: each costs a slab read), or the sample was better than the rest. Every row again, without a floor:
    // never fewer candidates than without the sample.
    held = 0;
    floor = -std::numeric_limits<float>::infinity();
    pass();
  }
  if (held > keep) cut();
  best.resize(held);
  TopK top(k);
  const size_t ahead = store.prefetch_ahead();
  for (size_t i = 0; i < std::min(best.size(), ahead); ++i) store.prefetch(key_id(best[i]));
  for (size_t i = 0; i < best.size(); ++i) {
    if (i + ahead < best.size()) store.prefetch(key_id(best[i + ahead]));
    const uint32_t id = key_id(best[i]);
    top.offer(use_exact ? store.exact_distance(ctx, id) : store.distance(ctx, id), id, filter);
  }
  return top.take_sorted();
}

}  // namespace medretrieve::index
