// Which elements a search may return, and the exact (brute-force) top-k that
// both FlatIndex and the HNSW's filtered fallback use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "index/labels.h"
#include "index/vector_store.h"

namespace medretrieve::index {

// (distance, internal id); lower distance is closer.
using Candidate = std::pair<float, uint32_t>;

// Predicate on internal ids (the bindings wrap a Python callable on external ids).
struct IdPredicate : std::function<bool(uint32_t)> {
  using std::function<bool(uint32_t)>::function;
  // Optional: takes what every call needs (the bindings: the GIL) until the
  // returned token is dropped, so a single-threaded scan pays for it once per
  // block of candidates instead of once per call.
  std::function<std::shared_ptr<void>()> hold;
};

// A caller's row filter: the internal ids a search may return, as a bitset
// (bit id % 64 of word id / 64), with its popcount and, when few are set, the
// ids themselves (ascending) for an exact scan. Built once per search call from
// a bitset over external ids (from_external), under the index's lock.
//
// When the external ids are the slots, the words are the caller's own, read in
// place (the bindings keep them alive for the call): compiling a 1M-row filter
// by copy zero-filled and copied 125 KB per search, a third of a filtered
// search's time at small ef. Otherwise they are `owned`. Not copyable: a copy
// would point at the source's words.
struct FilterGraph;

struct AllowedRows {
  const uint64_t* words = nullptr;
  size_t n_words = 0;
  size_t count = 0;
  std::vector<uint32_t> listed;  // the set ids when count <= kListedShare of the slots, else empty
  std::vector<uint64_t> owned;   // the words, when compiled rather than viewed
  const FilterGraph* graph = nullptr;  // the allowed elements' links (a CompiledFilter's), else null
  double clumping = 0;  // a compiled filter's Hnsw::allowed_clumping when walked two-hop, else 0 (not measured)

  AllowedRows() = default;
  AllowedRows(AllowedRows&&) = default;  // a vector's move keeps its buffer: `words` stays valid
  AllowedRows& operator=(AllowedRows&&) = default;
  AllowedRows(const AllowedRows&) = delete;
  AllowedRows& operator=(const AllowedRows&) = delete;

  // At most this share of the slots set: the ids are listed at build time (the
  // planner's exact scan reads them; a denser filter is walked or scanned whole).
  static constexpr double kListedShare = 1.0 / 16;

  bool test(uint32_t id) const {
    const size_t w = id >> 6;
    return w < n_words && (words[w] >> (id & 63) & 1);
  }
  // The set ids, ascending (listed, or decoded from the words).
  std::vector<uint32_t> ids() const;
  void ids(std::vector<uint32_t>& out) const;  // into `out`, whose memory is reused
  // The slots of `store` whose external id has its bit set in ext_words[0..n_words)
  // (bit ext % 64 of word ext / 64; ids past the words are not allowed). Deleted
  // slots may be set: searches drop them. A view of ext_words when the external
  // ids are the slots and no bit past the slots is set; else costs O(set bits)
  // hash look-ups when few bits are set, or one pass over the slots' external ids.
  static AllowedRows from_external(const VectorStore& store, const uint64_t* ext_words, size_t n_words);
};

// A caller's bitset over external ids, read in place (see AllowedRows::from_external).
struct ExternalBits {
  const uint64_t* words = nullptr;
  size_t n_words = 0;
};

// The links of a row filter's allowed elements among themselves: each one's ACORN two-hop expansion (its allowed
// neighbours, then those of its filtered-out neighbours; Hnsw::take_twohop0), computed once. The two-hop walk reads
// about 17 link lists per element it expands at 10% allowed; a walk over these reads one (Hnsw::walk_allowed).
// CSR over the slots: element id's links are links[begin[id] .. begin[id + 1]), empty for a filtered-out one.
struct FilterGraph {
  std::vector<uint32_t> begin;  // count() + 1 entries when built, else empty
  std::vector<uint32_t> links;

  bool built() const { return !begin.empty(); }
  size_t memory_bytes() const { return (begin.capacity() + links.capacity()) * sizeof(uint32_t); }
};

// A row filter compiled once against one state of an index (Hnsw::compile_filter) for the searches that reuse it:
// the caller's bitset (copied), its rows over the slots and, when the filter is walked two-hop, its FilterGraph.
// Valid while the index's `epoch` is unchanged (adds, deletions): after that a search compiles the rows from
// `ext_words` again, as for a plain bitset, and walks without the graph (the same results, at the plain speed).
// Not copyable or movable: `rows` points into `ext_words` and at `graph`.
struct CompiledFilter {
  uint64_t index = 0;   // the compiling index's instance number: another index refuses it
  uint64_t epoch = 0;   // the index's epoch it was compiled at
  std::vector<uint64_t> ext_words;
  AllowedRows rows;
  FilterGraph graph;

  CompiledFilter() = default;
  CompiledFilter(const CompiledFilter&) = delete;
  CompiledFilter& operator=(const CompiledFilter&) = delete;
  size_t memory_bytes() const {
    return ext_words.capacity() * sizeof(uint64_t) + rows.owned.capacity() * sizeof(uint64_t) +
           rows.listed.capacity() * sizeof(uint32_t) + graph.memory_bytes();
  }
};

struct ElementFilter {
  const VectorStore* store = nullptr;
  const LabelTable* labels = nullptr;
  const LabelQuery* query = nullptr;  // null: no label restriction
  const IdPredicate* fn = nullptr;    // null: no predicate
  const AllowedRows* rows = nullptr;  // null: no row filter

  bool restricts() const { return query != nullptr || fn != nullptr || rows != nullptr; }
  // Whether anything but the predicate can exclude an element (deletions, labels, rows).
  bool checks_stored() const { return query != nullptr || rows != nullptr || store->deleted_count() > 0; }
  bool label_ok(uint32_t id) const {
    if (!query) return true;
    const uint64_t sig = store->signature(id);
    if (!(sig & query->sig_any)) return false;
    if (store->labels_exact(id)) return (sig & query->sig_low) != 0;
    return labels->side_matches(id, *query);
  }
  // Live and carrying an allowed label: what the index itself can tell.
  // (The deletion bit lies in the element's header, a cache line a distance evaluation does not read: tested
  // only when the index holds deleted elements.)
  bool stored_ok(uint32_t id) const {
    return (!rows || rows->test(id)) && (store->deleted_count() == 0 || !store->is_deleted(id)) && label_ok(id);
  }
  // Live, carrying an allowed label and accepted by the predicate.
  bool allowed(uint32_t id) const { return stored_ok(id) && (!fn || (*fn)(id)); }
};

// The k closest allowed elements offered so far: a max-heap of (distance, id)
// (the worst kept on top, ties ordered as std::pair) and the bound a new
// element must beat, +inf until k are kept. The predicate runs only for an
// element that beats the bound.
class TopK {
 public:
  explicit TopK(size_t k) : k_(k) { heap_.reserve(k); }
  float bound() const { return bound_; }
  // Offers an element stored_ok() already passed (or that need not be tested).
  void offer(float d, uint32_t id, const ElementFilter& filter) {
    if (!(d < bound_) || k_ == 0) return;
    if (filter.fn && !(*filter.fn)(id)) return;
    if (heap_.size() == k_) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.back() = {d, id};
    } else {
      heap_.emplace_back(d, id);
    }
    std::push_heap(heap_.begin(), heap_.end());
    if (heap_.size() == k_) bound_ = heap_.front().first;
  }
  // The kept elements, closest first (empties this).
  std::vector<Candidate> take_sorted() {
    std::sort_heap(heap_.begin(), heap_.end());
    return std::move(heap_);
  }

 private:
  size_t k_;
  float bound_ = std::numeric_limits<float>::infinity();
  std::vector<Candidate> heap_;
};

// Exact top-k over ids[0..n) (or over 0..n when ids is null), allowed only.
// use_exact: score with the float32 originals when the store keeps them.
// Returns the k closest, closest first. The predicate runs only for elements
// close enough to enter the top k (as hnswlib's BruteforceSearch): a Python
// filter costs a GIL round trip per call, so calling it for every element
// made a filtered flat search 20x slower than hnswlib's. A predicate must
// therefore not count on being called for every element.
std::vector<Candidate> exact_topk(const VectorStore& store, const QueryCtx& ctx, const ElementFilter& filter,
                                  const uint32_t* ids, size_t n, size_t k, bool use_exact);

// The top k of each of nq queries over every element 0..store.count(), as
// exact_topk (same results, same predicate calls per query) into out[0..nq).
// The scan goes block by block of consecutive slabs (about 16 KiB, what stays
// in L1) and every query scores a block before the next is read: a block
// comes from memory once per nq queries, not once per query.
// hold_predicate: take the predicate's hold() for the blocks where it runs
// (only for a scan alone on its index: it keeps the GIL from other threads).
void exact_topk_scan(const VectorStore& store, const QueryCtx* ctxs, size_t nq, const ElementFilter& filter, size_t k,
                     std::vector<Candidate>* out, bool hold_predicate = false);

// The labels element `id` carries now (decoded from its signature or the side table).
std::vector<uint32_t> element_labels(const VectorStore& store, const LabelTable& table, uint32_t id);
// Replaces the labels of `id` (sorted unique) in the slab signature and the table.
void assign_labels(VectorStore& store, LabelTable& table, uint32_t id, const std::vector<uint32_t>& labels);

// How many results a search may be asked for. A row holds k results, padded
// with id -1 / score -inf past what the index can return, so k may exceed
// the stored elements, up to max(count, kMinMaxK): beyond that a k (up to
// 2**63 from Python) would only allocate padding, or wrap nq * k.
constexpr size_t kMinMaxK = 1024;
// Throws std::invalid_argument "<name>=<k> is too large: ..." when k > max(count, kMinMaxK).
void check_k(size_t k, size_t count, const char* name = "k");
// nq * k result cells; std::invalid_argument when the product does not fit.
size_t result_cells(size_t nq, size_t k);

// Writes one query's results into row outputs: external ids (padding -1) and
// similarities = -distance (padding -inf).
void write_row(const VectorStore& store, const std::vector<Candidate>& found, size_t k, int64_t* ids, float* scores);

}  // namespace medretrieve::index
