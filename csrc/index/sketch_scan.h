// The sketch scan: the filtered search's scan of many allowed rows, by their
// sign sketches (index/sketch.h) first, then exactly over the best of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "index/filter.h"
#include "index/sketch.h"

namespace medretrieve::index {

// Candidates re-scored exactly per result kept (of max(k, ef)): 40 x 10 = 400
// held the exact top 10 in 99.4-100% of the cases measured (sketch.h).
constexpr size_t kSketchRerankPerResult = 40;
// The sketch scan runs on lists at least this many times its re-scored
// candidates (on shorter ones the exact scan costs little more).
constexpr size_t kSketchMinListPerRerank = 4;

// A sketch row costs about this share of an exact scan's row (112k x 384 int8, half the rows: 6.8 against 54 ns
// a row at AVX-512, 12.8 against 45 at AVX2; from the caches, 11k rows: 9 against 17 ns).
constexpr double kSketchRowCost = 0.3;

// Whether sketch_topk takes this scan: the store keeps sketches, the list is
// long enough, and no predicate (its rejections among the re-scored could
// leave fewer than k where k rows pass).
bool sketch_scan_applies(const VectorStore& store, const ElementFilter& filter, size_t n, size_t k, size_t ef);

// What scanning n listed rows costs, in rows of the exact scan: n, or by the sketch scan where it applies, its
// rows at kSketchRowCost and the rows it re-scores. The planner weighs it against the walk's cost.
double scan_cost(const VectorStore& store, const ElementFilter& filter, size_t n, size_t k, size_t ef);

// The k closest allowed elements among ids[0..n): every allowed row's sketch
// estimate, then the best kSketchRerankPerResult * max(k, ef) re-scored by
// store.distance (by the float32 originals when use_exact), closest first.
std::vector<Candidate> sketch_topk(const VectorStore& store, const QueryCtx& ctx, const ElementFilter& filter,
                                   const uint32_t* ids, size_t n, size_t k, size_t ef, bool use_exact);

}  // namespace medretrieve::index
