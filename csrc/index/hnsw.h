// HNSW graph over int8 or float32 vectors (modelled on hnswlib's compact code).
//
// Level 0 links live in each element's slab (VectorStore); upper-level links
// are separately allocated blocks [u32 count][M u32 ids] per level, reached
// through a pointer table, so a memory-mapped file can serve them in place.
//
// Construction follows faiss where its graphs give more recall per ef than
// hnswlib's at the same M / ef_construction: a new element keeps up to 2M
// level-0 neighbours of its own (hnswlib: M), and a batch is inserted from the
// highest level down. On top, elements that no level-0 path from the entry
// point reaches are linked in after large batches (hnsw.cpp, Connectivity).
//
// Searches without a filter or deletions keep their ef best elements in one
// sorted pool (search_pool.h); filtered ones keep hnswlib's two heaps.
//
// Concurrency: add and search take `mu_` shared; resize, load and save take it
// exclusively (a writer-fair lock, common/shared_mutex.h, so searches cannot
// starve them). Writers change an element's links under a striped link mutex
// and publish the link count with release semantics; readers load the count
// with acquire semantics, so searches may run while items are being added.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <shared_mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/shared_mutex.h"
#include "index/filter.h"
#include "index/labels.h"
#include "index/norm_range.h"
#include "index/vector_store.h"
#include "index/visited.h"

namespace medretrieve::index {

struct HnswParams {
  Space space = Space::L2;
  DType dtype = DType::Float32;
  size_t dim = 0;
  size_t max_elements = 0;
  size_t M = 16;
  size_t ef_construction = 200;
  uint64_t seed = 100;
  bool keep_float = false;
  bool allow_replace_deleted = false;
  // Link diversification (Hnsw::select_neighbors): hnswlib's rule keeps a
  // candidate link only if no kept link is closer to it than the element is;
  // a list with room left then also takes the dropped candidates that pass
  // the rule relaxed by this factor on squared distances (Vamana's alpha).
  // 1 is hnswlib's rule alone; 1.05 buys recall per ef on every data shape
  // measured, for a longer build (bench/RESULTS.md, "prune_alpha").
  static constexpr float kDefaultPruneAlpha = 1.05f;
  static constexpr float kMinPruneAlpha = 1.f, kMaxPruneAlpha = 2.f;
  float prune_alpha = kDefaultPruneAlpha;
};

class MappedFile;
struct SearchScratch;  // per-thread working memory of searches (hnsw.cpp)

class Hnsw {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr int kMaxLevel = 30;
  // Filtered-search cost model: distance evaluations per expanded node, in units of M.
  static constexpr double kGraphCostPerNode = 0.75;
  // A filtered walk's distance evaluation costs about this many of an exact scan's (random reads, heap
  // updates, visited marks; bench/filtered.py, 20k x 384 float32): the walk's budget is the scan's cost / this.
  static constexpr size_t kWalkEvalCost = 2;
  // Row filters keeping less than this share of the elements walk with two-hop expansion (search_layer0_twohop;
  // bench/filtered.py, 100k x 384: at 10% random it beats the walks below). Those keeping more walk as hnswlib
  // does (search_layer0_screened: ef allowed elements kept, every element guiding): at 50% random it reaches the
  // recall of faiss's walk (the unfiltered walk, keeping the allowed elements it scores) at half the ef, for about
  // 1.07x its QPS on the BioASQ passages (recall 0.95, best of 8 interleaved runs), as fast at 1M x 768.
  static constexpr double kTwoHopShare = 0.35;
  // A row filter met around the query at less than this share of its share of the index is disjoint from the
  // query's neighbourhood: a walk from there ends among the wrong allowed elements (bench/filtered.py, 1M x 384
  // int8, 50% / 10% correlated: recall 0.58 / 0.88 at best), so the allowed rows are scanned. The probe is the
  // entry points' links (and their neighbours' links; allowed_met_near), trusted when at least kMetProbeExpected of
  // them are expected allowed: a random filter then reads as disjoint (at most 9 met) for about 1 query in 50,000
  // (Poisson(32)), and under kWideProbeMet at 50% for about 1 in 1,000 (binomial, 64 links).
  static constexpr double kDisjointMet = 0.3;
  static constexpr double kMetProbeExpected = 32;
  // A filter met under kDisjointMet is scanned at any share (at 50% correlated on the BioASQ passages, skipping the
  // walk below took a query from 0.291 to 0.268 ms, same recall). From kTwoHopShare up, a filter the probe meets at
  // kDisjointMet to kWideProbeMet of its share is measured again over the unfiltered walk (filter_met_on_walk) and
  // scanned when that walk met it at less than kWideWalkMet of its share (the screened walk from there scores many
  // elements, and some such walks end among the wrong allowed ones). bench/filtered.py, BioASQ passages, int8, 50%
  // correlated: the walk met 0.01-0.6 of the share (random: 0.7 and up); scanned at ef 10, recall 0.97 and a p99
  // of 0.54 ms, where the walk needed ef 32 for 0.954 and ran to a p99 of 2.0 ms. (The deeper screened walk this
  // replaced, for filters met at 0.01-0.3 of their share, had made 100k x 384 embedding-like rows 1.25x faster at
  // recall 0.95.)
  static constexpr double kWideProbeMet = 0.6, kWideWalkMet = 0.5;
  // Under kTwoHopShare, a filter whose allowed elements have allowed neighbours kClumped times as often as its
  // share (allowed_clumping: they lie together) is scanned when it is met around the query at less than kInClump
  // times that (the query lies outside them): the two-hop walk would end among the wrong allowed elements.
  // (bench/filtered.py, BioASQ passages, int8, ef 16: the correlated filters keeping 10% read 1.9-4.8 clumped and
  // 0.0-0.53 of that around the query, where the two-hop walk's recall was 0.73; the random one read 0.94.)
  // kClumpSamples elements' lists: about a microsecond a query for a plain bitset; compile_filter measures it once.
  static constexpr double kClumped = 1.5, kInClump = 0.75;
  static constexpr size_t kClumpSamples = 16;
  // ACORN's two-hop expansion lists up to kTwoHopRoom * M0 allowed elements per node (bench/filtered.py, 10% random,
  // against M0: 1.3x the QPS at 100k x 384, 1.1x on the BioASQ passages, the same at 1M).
  static constexpr size_t kTwoHopRoom = 2;
  // compile_filter links a filter's allowed elements (FilterGraph) from this many of them: below, the planner
  // scans them exactly anyway.
  static constexpr size_t kMinGraphRows = 1024;
  // prune_alpha's relaxed links leave 1/kRelaxedSlack of a list free (select_neighbors).
  static constexpr size_t kRelaxedSlack = 4;

  explicit Hnsw(const HnswParams& params);
  ~Hnsw();
  Hnsw(const Hnsw&) = delete;
  Hnsw& operator=(const Hnsw&) = delete;

  // Adds (or, with update, overwrites) n rows of dim floats. ids == null:
  // ids count()..count()+n-1. labels: null or n label lists. replace_deleted
  // reuses slots of deleted elements for new ids. Existing ids without update
  // raise std::invalid_argument; a full index std::runtime_error.
  void add(const float* data, size_t n, const uint64_t* ids, const std::vector<std::vector<uint32_t>>* labels,
           int num_threads, bool update, bool replace_deleted);

  // Batch k-NN. ef: n_ef values (1 = same for all, else one per query), or
  // null for ef(); raised to k. Rows padded with id -1 / score -inf.
  // Scores are similarities (ip/cosine: inner product, l2: -squared L2).
  // allowed: null, or the external ids results may have (compiled to slots once per call). compiled: null, or a
  // filter compile_filter made on this index (used in place of `allowed`; std::invalid_argument from another).
  void search(const float* queries, size_t nq, size_t k, const size_t* ef, size_t n_ef, const LabelQuery* labels,
              const IdPredicate* predicate, int num_threads, int64_t* out_ids, float* out_scores,
              const ExternalBits* allowed = nullptr, const CompiledFilter* compiled = nullptr) const;

  // Compiles a bitset over external ids (as search's `allowed`) once for the searches that reuse it: its rows over
  // the slots and, under kTwoHopShare of the live elements (kMinGraphRows at least), its FilterGraph, built on
  // num_threads threads (about 30 ms for 11,000 allowed of 112,511 384-d int8 rows on one). Good until the next
  // add or deletion (epoch()); searches with it stay correct after, at the plain bitset's speed.
  std::shared_ptr<CompiledFilter> compile_filter(const uint64_t* words, size_t n_words, int num_threads) const;
  // Changes with every add and deletion: a CompiledFilter of an older epoch is not used for its graph.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  // One query; internal ids and distances (lower is closer; similarity =
  // -distance), closest first. For native callers (search_mmr): pair with the
  // row accessors below. Unlike search(), these do not lock: hold
  // std::shared_lock(mutex()) around the search AND the row reads.
  std::vector<Candidate> search_internal(const float* query, size_t k, size_t ef, const LabelQuery* labels,
                                         const IdPredicate* predicate, const AllowedRows* rows = nullptr) const;
  // Same with an already prepared query.
  std::vector<Candidate> search_prepared(const QueryCtx& ctx, size_t k, size_t ef, const LabelQuery* labels,
                                         const IdPredicate* predicate, const AllowedRows* rows = nullptr) const;

  // int8: sets the centre from sample rows (must precede the first add).
  void train(const float* sample, size_t n);
  void mark_deleted(uint64_t ext);
  void unmark_deleted(uint64_t ext);
  void resize(size_t max_elements);
  // hnswlib's load_index(..., allow_replace_deleted): whether add(replace_deleted)
  // may reuse deleted slots, from now on (every deleted slot becomes reusable).
  void set_allow_replace_deleted(bool allow);
  void set_ef(size_t ef) { ef_.store(ef ? ef : 1); }
  // Layer-0 entry points taken from a beam search of this width on layer 1 (1: one greedy descent, as
  // hnswlib; kAutoEntryBeam: ef / kAutoBeamPerEf, the default). The beam's distance evaluations grow
  // with b as the layer-0 search's grow with ef, so at ef / 8 it costs a near-constant share of a query
  // (under a tenth) at any ef, and it frees the queries whose single descent ends in the wrong cluster,
  // which otherwise only a much larger ef recovers.
  static constexpr size_t kAutoEntryBeam = 0;
  static constexpr size_t kAutoBeamPerEf = 8;
  void set_entry_beam(size_t beam) { entry_beam_.store(beam); }
  size_t entry_beam() const { return entry_beam_.load(); }
  // The beam a search with this ef uses.
  size_t entry_beam_for(size_t ef) const {
    const size_t beam = entry_beam_.load(std::memory_order_relaxed);
    return beam != kAutoEntryBeam ? beam : std::max<size_t>(1, ef / kAutoBeamPerEf);
  }
  // Exact search over the allowed subset when its size <= factor * (estimated
  // graph cost = ef / selectivity * kGraphCostPerNode * M distance evaluations), and when a walk scores
  // more elements than that size (a filter correlated with the query); 0 forces graph search.
  void set_filter_exact_factor(double f) { filter_exact_factor_ = f; }
  double filter_exact_factor() const { return filter_exact_factor_; }
  // Whether the scans of many allowed rows read sign sketches first (index/sketch_scan.h; on by default for int8
  // inner-product and cosine indexes, dim / 8 + 8 bytes a row); off frees them and every scan is exact. Not saved.
  void set_scan_sketches(bool on);
  bool scan_sketches() const { return store_.sketches() != nullptr; }

  // External ids of every stored element (deleted ones included, as hnswlib).
  std::vector<uint64_t> ids() const;
  // Dequantized vectors of live elements; unknown or deleted ids raise.
  void get_items(const uint64_t* ids, size_t n, float* out) const;
  std::vector<uint32_t> labels_of(uint64_t ext) const;
  bool contains(uint64_t ext) const;
  bool is_deleted_ext(uint64_t ext) const;

  // --- parameters and state ---
  const HnswParams& params() const { return p_; }
  size_t ef() const { return ef_.load(); }
  size_t count() const { return store_.count(); }
  size_t deleted_count() const { return store_.deleted_count(); }
  size_t capacity() const { return store_.capacity(); }
  int max_level() const { return int(int32_t(ep_state_.load() >> 32)); }
  uint32_t entry_point() const { return uint32_t(ep_state_.load()); }
  bool read_only() const { return store_.read_only(); }
  size_t memory_bytes() const;

  // --- graph inspection (tests, diagnostics), internal ids < count() ---
  int level(uint32_t id) const { return level_of(id); }
  std::vector<uint32_t> neighbours(uint32_t id, int level) const { return links_copy(id, level); }

  // --- row access for native consumers (MMR): valid while the caller holds
  // shared_lock(mutex()) and for internal ids < count(). int8 pair similarity
  // (fusion::mmr_select_i8): ip/cosine base = centre_norm2(), offset = aux,
  // weight 1; l2 base = 0, offset = -aux, weight 2. float32: plain rows. ---
  const VectorStore& store() const { return store_; }
  SharedMutex& mutex() const { return mu_; }
  Space space() const { return p_.space; }
  DType dtype() const { return p_.dtype; }
  const int8_t* row_i8(uint32_t id) const { return store_.code_i8(id); }
  const float* row_f32(uint32_t id) const { return store_.code_f32(id); }
  float row_scale(uint32_t id) const { return store_.scale(id); }
  float row_aux(uint32_t id) const { return store_.aux(id); }
  const float* centre() const { return store_.centre(); }
  float centre_norm2() const { return store_.centre_norm2(); }

  // --- persistence (file_format.cpp) ---
  // snapshot: copy the file into memory under the lock and write it after (searches wait only for the copy);
  // otherwise stream it from the index under the lock (no second copy of the index in memory).
  void save(const std::string& path, bool snapshot = true) const;
  std::vector<char> to_bytes() const;
  static std::unique_ptr<Hnsw> load(const std::string& path, bool mmap);
  static std::unique_ptr<Hnsw> from_bytes(const char* data, size_t size);

 private:
  struct Links {
    const uint32_t* ids;
    uint32_t n;
  };
  using MaxHeap = std::priority_queue<Candidate>;

  // Links of an upper level (u32 blocks, read in place).
  Links upper_links(uint32_t id, int level) const;
  // Links of any level into out (level 0 decoded from the slab).
  void read_links(uint32_t id, int level, std::vector<uint32_t>& out) const;
  void set_links(uint32_t id, int level, const uint32_t* ids, uint32_t n);
  std::mutex& link_lock(uint32_t id) const { return link_locks_[id & (kLinkLocks - 1)]; }
  int level_of(uint32_t id) const { return levels_[id]; }
  int random_level();
  size_t max_links(int level) const { return level ? p_.M : M0_; }
  static std::vector<size_t> insertion_order(const std::vector<int>& level);

  void insert(uint32_t id, const float* x, int level);
  void relink(uint32_t id, const float* x);
  void repair_neighbours(uint32_t id);
  std::vector<uint32_t> links_copy(uint32_t id, int level) const;
  uint32_t greedy_descent(const QueryCtx& ctx, uint32_t ep, int from_level, int to_level, bool locked) const;
  // Marks the not yet visited ids among ids[0..n) visited, copies them to
  // `fresh` (returns how many) and prefetches the first store().prefetch_ahead(): the
  // distance loops then prefetch exactly the vectors they will read, ahead.
  size_t take_unvisited(const uint32_t* ids, size_t n, VisitedList& vis, uint32_t* fresh) const;
  size_t take_unvisited0(uint32_t id, VisitedList& vis, uint32_t* fresh) const;
  MaxHeap search_layer_build(const QueryCtx& ctx, uint32_t ep, int level, uint32_t exclude) const;
  // Layer-0 search from the entry points eps[0..n_eps) that keeps only the elements the filter allows and that
  // are not deleted (filter null: deletions only), over one sorted pool (search_pool.h's ScreenedPool: screened-out
  // candidates still guide the search, as hnswlib's two heaps); the ef closest allowed, closest first.
  // max_evals: the walk stops before scoring more elements than that and sets *over (the planner then scans).
  std::vector<Candidate> search_layer0_screened(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps,
                                                size_t n_eps, size_t ef, const ElementFilter* filter,
                                                size_t max_evals, bool* over) const;
  // Scores fresh[0..m) (its first elements prefetched by take_unvisited0 / take_twohop0), four at a time, calling
  // take(distance, id) for each.
  template <class Take>
  void score_fresh(const QueryCtx& ctx, const uint32_t* fresh, size_t m, Take&& take) const;
  // ACORN's two-hop expansion of `id`: its allowed unvisited neighbours, then the allowed unvisited neighbours of
  // its filtered-out ones, kTwoHopRoom * M0 at most, into fresh (marked visited; returns how many), the first ones
  // prefetched. `allowed(id)`: whether id passes the filter; fresh holds (kTwoHopRoom + 2) * M0 (working room).
  template <class Allowed>
  size_t take_twohop0(uint32_t id, VisitedList& vis, const Allowed& allowed, uint32_t* fresh) const;
  // Layer-0 search of a row filter that scores allowed elements only (take_twohop0, or the FilterGraph of a compiled
  // filter of this epoch), over one sorted pool (search_pool.h) from eps[0..n_eps): the ef closest found, closest
  // first.
  std::vector<Candidate> search_layer0_twohop(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps,
                                              size_t n_eps, size_t ef, const ElementFilter& filter) const;
  // The walk of search_layer0_twohop from eps[0..n_eps): every element scored is allowed (`allowed` tests the
  // entry points, which expand two-hop over the index's links when filtered out); expand(id, next, vis, fresh)
  // puts an expanded element's unvisited allowed neighbours into fresh (returns how many; `next`: the element
  // expanded after it, kNone when none is known, for a prefetch): take_twohop0, or a compiled filter's FilterGraph
  // list (one read per element instead of about 17 at 10% allowed).
  template <class Allowed, class Expand>
  std::vector<Candidate> walk_allowed(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps, size_t n_eps,
                                      size_t ef, const Allowed& allowed, Expand&& expand) const;
  // Fills graph with the two-hop expansions of rows' allowed elements (compile_filter).
  void link_allowed(const AllowedRows& rows, int num_threads, FilterGraph& graph) const;

  // The unfiltered layer-0 walk over one sorted pool (s.pool, search_pool.h) from eps[0..n_eps), calling
  // visit(distance, id) for every element it scores.
  template <class Visit>
  void walk_pool(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps, size_t n_eps, size_t ef,
                 Visit&& visit) const;
  // A row filter keeping `share` of the elements that the entry points' neighbourhood holds few of: how often the
  // unfiltered walk from eps[0..n_eps) meets its allowed elements against `share` (about 1 for a filter
  // independent of the query; under kWideWalkMet correlated with it).
  double filter_met_on_walk(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps, size_t n_eps, size_t ef,
                            const ElementFilter& filter, double share) const;
  // Adds the layer-0 links of `id` to `seen` and those `allowed` accepts to `passed`.
  template <class Allowed>
  void count_allowed_links(uint32_t id, const Allowed& allowed, size_t& seen, size_t& passed) const;
  // The allowed share of the layer-0 links of eps[0..n_eps) (and of their neighbours' links when too few of them
  // are expected allowed), against `share` (1 when still too few to tell).
  double allowed_met_near(const uint32_t* eps, size_t n_eps, const ElementFilter& filter, double share) const;
  // The allowed share of the layer-0 links of kClumpSamples allowed elements against `share`: about 1 when the
  // filter keeps rows anywhere, more when its allowed rows lie together (a filter correlated with the vectors).
  double allowed_clumping(const AllowedRows& rows, double share) const;
  // Unfiltered layer-0 search from eps[0..n_eps) over one sorted pool (search_pool.h); the ef closest, closest first.
  std::vector<Candidate> search_layer0_pool(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps, size_t n_eps,
                                            size_t ef) const;
  // The `ef` elements closest to the query on an upper `level`, into s.starts (farthest first).
  void beam_upper(SearchScratch& s, const QueryCtx& ctx, uint32_t ep, int level, size_t ef) const;
  // search_prepared over working memory the caller leased (hnsw.cpp, ScratchLease).
  std::vector<Candidate> search_with(SearchScratch& s, const QueryCtx& ctx, size_t k, size_t ef, const LabelQuery* labels,
                                     const IdPredicate* predicate, const AllowedRows* rows) const;
  // The planner of a restricted search: the allowed elements to scan exactly (true), or false
  // when the graph walk is cheaper. allowed_max: an upper bound on the allowed count (> 0); scan_rows: what
  // scanning them costs, in exact-scan rows (index/sketch_scan.h, scan_cost).
  // forced: list them whatever the estimate (the walk ran past its budget).
  bool plan_exact(size_t allowed_max, double scan_rows, size_t ef, const LabelQuery* labels,
                  const AllowedRows* rows, std::vector<uint32_t>& ids, bool forced = false) const;
  // The k closest of the allowed elements the planner listed: the sketch scan (index/sketch_scan.h) on long
  // lists, else the exact scan.
  std::vector<Candidate> scan_allowed(const QueryCtx& ctx, const ElementFilter& filter,
                                      const std::vector<uint32_t>& ids, size_t k, size_t ef) const;
  // An upper bound on the allowed count of a label and / or row restriction (a filtered walk may spend the
  // evaluations their scan would cost before the planner scans them instead).
  size_t walk_budget(const LabelQuery* labels, const AllowedRows* rows) const;
  // Compiles a caller's bitset over external ids (null: none) under the lock the search holds.
  std::optional<AllowedRows> compile_rows(const ExternalBits* allowed) const;
  // Pushes (distance to base, id) for ids other than base, keeping the `keep` closest.
  void push_distances(uint32_t base, const uint32_t* ids, size_t n, size_t keep, MaxHeap& out) const;
  // Keeps at most m of top (distances to `base`), diversified (see norm_range.h).
  void select_neighbors(MaxHeap& top, size_t m, uint32_t base) const;
  std::vector<uint32_t> set_own_links(uint32_t id, MaxHeap& top, int level);
  void add_backlinks(uint32_t id, const std::vector<uint32_t>& selected, int level, bool is_update);
  void link_element(uint32_t id, const QueryCtx& ctx, uint32_t ep, int level, int max_level, bool is_update);
  void allocate_upper(uint32_t id, int level);
  bool add_backlink(uint32_t id, uint32_t other, int level, bool is_update);

  // Connectivity repair (see hnsw.cpp).
  struct InFlight {
    explicit InFlight(std::atomic<int>& c) : count(c) { ++count; }
    ~InFlight() { --count; }
    std::atomic<int>& count;
  };
  void check_connectivity(size_t rows);
  void connect_unreachable(size_t n);
  void mark_reachable(uint32_t from, VisitedList& seen) const;
  void link_from_nearest(uint32_t id);
  void replace_farthest_link(uint32_t other, uint32_t id);

  HnswParams p_;
  size_t M0_;
  double mult_;
  std::atomic<size_t> ef_{10};
  std::atomic<size_t> entry_beam_{kAutoEntryBeam};
  double filter_exact_factor_ = 1.0;
  VectorStore store_;
  NormRange norms_;  // inner product only: decides select_neighbors' rule
  LabelTable labels_;
  mutable VisitedPool visited_;

  std::vector<uint32_t*> upper_;  // per element: level * (M + 1) u32, or null
  std::vector<uint8_t> levels_;
  // Packed (max_level << 32 | entry point) so readers see a consistent pair.
  std::atomic<uint64_t> ep_state_;
  std::mutex ep_mu_;
  std::mutex level_mu_;
  std::mt19937_64 level_rng_;
  std::mutex train_mu_;
  std::mutex deleted_mu_;
  std::vector<uint32_t> deleted_slots_;  // reusable by replace_deleted
  static constexpr size_t kConnectivityEvery = 16;
  std::atomic<int> adds_in_flight_{0};
  std::atomic<size_t> unchecked_rows_{0};  // rows added since the last connectivity pass
  std::mutex connect_mu_;

  static constexpr size_t kLinkLocks = 4096;
  mutable std::array<std::mutex, kLinkLocks> link_locks_;
  mutable SharedMutex mu_;
  std::shared_ptr<MappedFile> mapping_;  // set for read-only mmap loads
  // Which index a CompiledFilter came from (a number no other Hnsw of this process has), and the state it saw:
  // bumped when an add starts and ends (EpochBump) and by every deletion.
  const uint64_t instance_;
  std::atomic<uint64_t> epoch_{0};
  struct EpochBump {
    explicit EpochBump(std::atomic<uint64_t>& e) : epoch(e) { ++epoch; }
    ~EpochBump() { ++epoch; }
    std::atomic<uint64_t>& epoch;
  };

  friend class HnswSerializer;
};

}  // namespace medretrieve::index
