#include "index/hnsw.h"
#include "index/search_pool.h"
#include "index/sketch_scan.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "common/parallel.h"

namespace medretrieve::index {

// Working memory a search thread keeps from one query to the next (a search
// otherwise allocated about 20 times: the query's copy and code, neighbour
// lists, the beam's heaps, the pool).
struct SearchScratch {
  QueryCtx ctx;
  std::vector<uint32_t> fresh, starts;
  // The scan's allowed ids: kept from search to search, as a list of 50k ids or more is fresh pages (a fault and
  // zeroing each) when allocated again: a tenth of the scan's time at 56k.
  std::vector<uint32_t> scan_ids;
  std::vector<Candidate> top, cand;  // beam_upper's heaps: (distance, id) and (-distance, id)
  SearchPool pool{1};
  ScreenedPool screened;
};

namespace {
constexpr uint64_t pack_ep(uint32_t ep, int level) { return (uint64_t(uint32_t(level)) << 32) | ep; }

// The thread's SearchScratch for the life of one search, or a private one when
// a search on this thread already holds it (a filter callback that searches).
class ScratchLease {
 public:
  ScratchLease() {
    thread_local SearchScratch shared;
    thread_local bool busy = false;
    if (busy) {
      own_ = std::make_unique<SearchScratch>();
      s_ = own_.get();
    } else {
      busy = true;
      busy_ = &busy;
      s_ = &shared;
    }
  }
  ~ScratchLease() {
    if (busy_) *busy_ = false;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  SearchScratch& operator*() const { return *s_; }
  SearchScratch* operator->() const { return s_; }

 private:
  SearchScratch* s_;
  std::unique_ptr<SearchScratch> own_;
  bool* busy_ = nullptr;
};
}  // namespace

namespace {
uint64_t next_instance() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}
}  // namespace

Hnsw::Hnsw(const HnswParams& params)
    : p_(params),
      M0_(2 * params.M),
      mult_(params.M > 1 ? 1.0 / std::log(double(params.M)) : 1.0),
      store_(params.space, params.dtype, params.dim, 2 * params.M, params.keep_float, /*sketch=*/true),
      visited_(0),
      ep_state_(pack_ep(kNone, -1)),
      level_rng_(params.seed),
      instance_(next_instance()) {
  if (params.M < 2 || params.M > 2048) throw std::invalid_argument("M must be in [2, 2048]");
  if (params.ef_construction == 0) throw std::invalid_argument("ef_construction must be positive");
  // Checked where users set it (the binding) and where files bring it (load checks).
  assert(params.prune_alpha >= HnswParams::kMinPruneAlpha && params.prune_alpha <= HnswParams::kMaxPruneAlpha);
  resize(params.max_elements);
}

Hnsw::~Hnsw() {
  if (!mapping_)
    for (uint32_t* b : upper_) std::free(b);
}

int Hnsw::random_level() {
  std::lock_guard<std::mutex> g(level_mu_);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double r = 1.0 - u(level_rng_);  // (0, 1]
  return std::min(kMaxLevel, int(-std::log(r) * mult_));
}

void Hnsw::resize(size_t max_elements) {
  std::unique_lock<SharedMutex> g(mu_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot resize");
  if (max_elements < store_.count())
    throw std::runtime_error("Cannot resize, max element is less than the current number of elements");
  store_.reserve(max_elements);
  upper_.resize(max_elements, nullptr);
  levels_.resize(max_elements, 0);
  visited_.resize(max_elements);
}

Hnsw::Links Hnsw::upper_links(uint32_t id, int level) const {
  const uint32_t* block = upper_[id] + size_t(level - 1) * (p_.M + 1);
  return {block + 1, __atomic_load_n(block, __ATOMIC_ACQUIRE)};
}

void Hnsw::read_links(uint32_t id, int level, std::vector<uint32_t>& out) const {
  if (level == 0) {
    out.resize(M0_);
    out.resize(store_.read_links0(id, out.data()));
  } else {
    const Links l = upper_links(id, level);
    out.assign(l.ids, l.ids + l.n);
  }
}

void Hnsw::set_links(uint32_t id, int level, const uint32_t* ids, uint32_t n) {
  if (level == 0) {
    store_.write_links0(id, ids, n);
  } else {
    uint32_t* block = upper_[id] + size_t(level - 1) * (p_.M + 1);
    std::memcpy(block + 1, ids, n * sizeof(uint32_t));
    __atomic_store_n(block, n, __ATOMIC_RELEASE);
  }
}

void Hnsw::allocate_upper(uint32_t id, int level) {
  std::free(upper_[id]);
  upper_[id] = nullptr;
  if (level > 0) {
    const size_t bytes = size_t(level) * (p_.M + 1) * sizeof(uint32_t);
    upper_[id] = static_cast<uint32_t*>(std::calloc(1, bytes));
    if (!upper_[id]) throw std::bad_alloc();
  }
  levels_[id] = uint8_t(level);
}

// ---------------------------------------------------------------------------
// Search primitives

uint32_t Hnsw::greedy_descent(const QueryCtx& ctx, uint32_t ep, int from_level, int to_level, bool locked) const {
  uint32_t cur = ep;
  float cur_d = store_.distance(ctx, cur);
  std::vector<uint32_t> buf;
  for (int level = from_level; level > to_level; --level) {
    bool changed = true;
    while (changed) {
      changed = false;
      const uint32_t* ids;
      uint32_t n;
      if (locked) {
        std::lock_guard<std::mutex> g(link_lock(cur));
        Links l = upper_links(cur, level);
        buf.assign(l.ids, l.ids + l.n);
        ids = buf.data();
        n = l.n;
      } else {
        Links l = upper_links(cur, level);
        ids = l.ids;
        n = l.n;
      }
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t nb = ids[i];
        const float d = store_.distance(ctx, nb);
        if (d < cur_d) {
          cur_d = d;
          cur = nb;
          changed = true;
        }
      }
    }
  }
  return cur;
}

size_t Hnsw::take_unvisited(const uint32_t* ids, size_t n, VisitedList& vis, uint32_t* fresh) const {
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {  // fresh has room for n: written always, kept when unseen
    fresh[m] = ids[i];
    m += !vis.seen_then_mark(ids[i]);
  }
  for (size_t i = 0; i < std::min(m, store_.prefetch_ahead()); ++i) store_.prefetch(fresh[i]);
  return m;
}

// take_unvisited over `id`'s level-0 list, decoded on the way. No lock: an id
// torn by a concurrent rewrite of the list may exceed the capacity, and is skipped.
size_t Hnsw::take_unvisited0(uint32_t id, VisitedList& vis, uint32_t* fresh) const {
  const uint32_t n = store_.link_count0(id);
  const size_t limit = store_.capacity();
  size_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t nb = store_.link0(id, i);
    if (nb >= limit) continue;
    fresh[m] = nb;  // as take_unvisited: no branch on whether nb was seen
    m += !vis.seen_then_mark(nb);
  }
  for (size_t i = 0; i < std::min(m, store_.prefetch_ahead()); ++i) store_.prefetch(fresh[i]);
  return m;
}

Hnsw::MaxHeap Hnsw::search_layer_build(const QueryCtx& ctx, uint32_t ep, int level, uint32_t exclude) const {
  auto vis = visited_.borrow();
  MaxHeap top, cand;  // cand holds (-distance, id)
  float lower = std::numeric_limits<float>::max();
  const float d0 = store_.distance(ctx, ep);
  if (!store_.is_deleted(ep) && ep != exclude) {
    top.emplace(d0, ep);
    lower = d0;
  }
  cand.emplace(-d0, ep);
  vis->test_and_set(ep);
  std::vector<uint32_t> buf, fresh(M0_);
  buf.reserve(M0_);
  const size_t ahead = store_.prefetch_ahead();
  while (!cand.empty()) {
    const Candidate c = cand.top();
    if (-c.first > lower && top.size() >= p_.ef_construction) break;
    cand.pop();
    {
      std::lock_guard<std::mutex> g(link_lock(c.second));
      read_links(c.second, level, buf);
    }
    const size_t m = take_unvisited(buf.data(), buf.size(), *vis, fresh.data());
    for (size_t i = 0; i < m; ++i) {
      if (i + ahead < m) store_.prefetch(fresh[i + ahead]);
      const uint32_t nb = fresh[i];
      const float d = store_.distance(ctx, nb);
      if (top.size() < p_.ef_construction || d < lower) {
        cand.emplace(-d, nb);
        if (!store_.is_deleted(nb) && nb != exclude) top.emplace(d, nb);
        if (top.size() > p_.ef_construction) top.pop();
        if (!top.empty()) lower = top.top().first;
      }
    }
  }
  return top;
}

// The `ef` elements closest to the query on an upper `level` (no locks: searches hold the shared lock).
void Hnsw::beam_upper(SearchScratch& s, const QueryCtx& ctx, uint32_t ep, int level, size_t ef) const {
  auto vis = visited_.borrow();
  std::vector<Candidate>& top = s.top;  // max-heap on distance: the farthest kept on top
  std::vector<Candidate>& cand = s.cand;  // max-heap on -distance: the closest unexpanded on top
  top.clear();
  cand.clear();
  const float d0 = store_.distance(ctx, ep);
  top.emplace_back(d0, ep);
  cand.emplace_back(-d0, ep);
  vis->test_and_set(ep);
  float lower = d0;
  s.fresh.resize(std::max(p_.M, M0_));
  uint32_t* fresh = s.fresh.data();
  const size_t ahead = store_.prefetch_ahead();
  while (!cand.empty()) {
    const Candidate c = cand.front();
    if (-c.first > lower && top.size() >= ef) break;
    std::pop_heap(cand.begin(), cand.end());
    cand.pop_back();
    const Links l = upper_links(c.second, level);
    const size_t m = take_unvisited(l.ids, l.n, *vis, fresh);  // upper elements lie far apart: prefetch
    for (size_t i = 0; i < m; ++i) {
      if (i + ahead < m) store_.prefetch(fresh[i + ahead]);
      const uint32_t nb = fresh[i];
      const float d = store_.distance(ctx, nb);
      if (top.size() < ef || d < lower) {
        cand.emplace_back(-d, nb);
        std::push_heap(cand.begin(), cand.end());
        top.emplace_back(d, nb);
        std::push_heap(top.begin(), top.end());
        if (top.size() > ef) {
          std::pop_heap(top.begin(), top.end());
          top.pop_back();
        }
        lower = top.front().first;
      }
    }
  }
  // Farthest first, as popping the heap would give them.
  std::sort_heap(top.begin(), top.end());
  s.starts.resize(top.size());
  for (size_t i = 0; i < top.size(); ++i) s.starts[i] = top[top.size() - 1 - i].second;
}

template <class Take>
void Hnsw::score_fresh(const QueryCtx& ctx, const uint32_t* fresh, size_t m, Take&& take) const {
  const size_t ahead = store_.prefetch_ahead();
  size_t i = 0;
  for (float d[4]; i + 4 <= m; i += 4) {  // four at a time: one kernel call, the query read once
    for (size_t j = i + ahead; j < std::min(i + 4 + ahead, m); ++j) store_.prefetch(fresh[j]);
    store_.distance4(ctx, fresh + i, d);
    for (size_t j = 0; j < 4; ++j) take(d[j], fresh[i + j]);
  }
  for (; i < m; ++i) {
    if (i + ahead < m) store_.prefetch(fresh[i + ahead]);
    take(store_.distance(ctx, fresh[i]), fresh[i]);
  }
}

std::vector<Candidate> Hnsw::search_layer0_screened(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps,
                                                    size_t n_eps, size_t ef, const ElementFilter* filter,
                                                    size_t max_evals, bool* over) const {
  auto vis = visited_.borrow();
  ScreenedPool& pool = s.screened;
  pool.reset(ef);
  const auto allowed = [&](uint32_t id) { return filter ? filter->allowed(id) : !store_.is_deleted(id); };
  const auto offer = [&](float d, uint32_t id) {
    if (pool.admits(d)) pool.insert(d, id, allowed(id));  // the filter only for elements that would enter
  };
  for (size_t e = 0; e < n_eps; ++e)
    if (!vis->test_and_set(eps[e])) offer(store_.distance(ctx, eps[e]), eps[e]);
  s.fresh.resize(std::max(p_.M, M0_));
  uint32_t* fresh = s.fresh.data();
  while (pool.has_unexpanded()) {
    const uint32_t id = pool.expand_next();
    uint32_t next;
    if (pool.peek_next(next)) store_.prefetch_links0(next);
    const size_t m = take_unvisited0(id, *vis, fresh);
    if (m > max_evals) {
      *over = true;
      break;
    }
    max_evals -= m;
    score_fresh(ctx, fresh, m, offer);
  }
  std::vector<Candidate> found;
  pool.take_allowed(found);
  return found;
}

// The walk reads about 17 lists per element it expands (10% random): their reading is what it costs. Fetching only the
// unvisited ones, testing the filter without a branch and RowBits below gave 1.3x the QPS at 10% random (100k and
// 1M x 384, 1M x 768, the BioASQ passages; int8), at the same recall.
template <class Allowed>
size_t Hnsw::take_twohop0(uint32_t id, VisitedList& vis, const Allowed& allowed, uint32_t* fresh) const {
  const size_t limit = store_.capacity();
  const size_t room = kTwoHopRoom * M0_;
  uint32_t* out = fresh + room;   // the filtered-out neighbours not yet expanded, their lists being fetched
  uint32_t* passed = out + M0_;   // one such list's allowed ids
  const uint32_t n = store_.link_count0(id);
  size_t m = 0;
  uint32_t n_out = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t nb = store_.link0(id, i);
    if (nb >= limit || vis.visited(nb)) continue;
    if (allowed(nb)) {
      vis.test_and_set(nb);
      fresh[m++] = nb;
    } else {
      // Their lists are read below, one after the other: fetched together now.
      store_.prefetch_links0(nb);
      out[n_out++] = nb;
    }
  }
  for (uint32_t i = 0; i < n_out && m < room; ++i) {
    if (vis.test_and_set(out[i])) continue;
    // The allowed ids first, without a branch on the filter (about one in ten passes: such a branch mispredicts
    // often), then the visited test for those few.
    const uint32_t n2 = store_.link_count0(out[i]);
    uint32_t n_passed = 0;
    for (uint32_t j = 0; j < n2; ++j) {
      const uint32_t nb2 = store_.link0(out[i], j);
      passed[n_passed] = nb2;
      n_passed += nb2 < limit && allowed(nb2);
    }
    for (uint32_t j = 0; j < n_passed && m < room; ++j)
      if (!vis.test_and_set(passed[j])) fresh[m++] = passed[j];
  }
  for (size_t i = 0; i < std::min(m, store_.prefetch_ahead()); ++i) store_.prefetch(fresh[i]);
  return m;
}

namespace {
// A row filter's bits as the two-hop walk tests them, held in locals: the walk tests about 30 ids per element it
// expands, and ElementFilter::allowed re-reads its members (labels, predicate, deletions) for each one.
struct RowBits {
  const uint64_t* words;
  size_t n_words;
  bool operator()(uint32_t id) const {
    const size_t w = id >> 6;
    return w < n_words && (words[w] >> (id & 63) & 1);
  }
};
}  // namespace

std::vector<Candidate> Hnsw::search_layer0_twohop(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps,
                                                  size_t n_eps, size_t ef, const ElementFilter& filter) const {
  const FilterGraph* graph = filter.rows && !filter.query && !filter.fn ? filter.rows->graph : nullptr;
  const auto walk = [&](const auto& allowed) {
    if (!graph)
      return walk_allowed(s, ctx, eps, n_eps, ef, allowed, [&](uint32_t id, uint32_t next, VisitedList& vis,
                                                               uint32_t* fresh) {
        if (next != kNone) store_.prefetch_links0(next);
        return take_twohop0(id, vis, allowed, fresh);
      });
    // A compiled filter of this epoch: one list per element expanded. (Elements added since, by an add still in
    // flight, have none.)
    const size_t listed = graph->begin.size() - 1;
    const uint32_t* begin = graph->begin.data();
    const uint32_t* links = graph->links.data();
    return walk_allowed(s, ctx, eps, n_eps, ef, allowed, [&](uint32_t id, uint32_t next, VisitedList& vis,
                                                             uint32_t* fresh) {
      if (next < listed) __builtin_prefetch(links + begin[next]);
      size_t m = 0;
      if (id < listed)
        for (uint32_t j = begin[id]; j < begin[id + 1]; ++j)
          if (!vis.test_and_set(links[j])) fresh[m++] = links[j];
      for (size_t i = 0; i < std::min(m, store_.prefetch_ahead()); ++i) store_.prefetch(fresh[i]);
      return m;
    });
  };
  if (filter.rows && !filter.query && !filter.fn && store_.deleted_count() == 0)
    return walk(RowBits{filter.rows->words, filter.rows->n_words});
  return walk([&filter](uint32_t id) { return filter.allowed(id); });
}

void Hnsw::link_allowed(const AllowedRows& rows, int num_threads, FilterGraph& graph) const {
  const std::vector<uint32_t> ids = rows.ids();  // ascending
  const size_t room = kTwoHopRoom * M0_, n = store_.count();
  if (ids.empty() || ids.size() * room > UINT32_MAX) return;  // CSR offsets are 32-bit: left unbuilt (the plain walk)
  // Expanded a block at a time into `block`, then appended: the working memory stays a block's whatever the count.
  constexpr size_t kBlock = 4096;
  std::vector<uint32_t> block(std::min(kBlock, ids.size()) * room), sizes(block.size() / room);
  std::vector<uint32_t> first(ids.size() + 1);  // where each allowed element's links start
  const size_t workers = std::min(resolve_threads(num_threads), sizes.size());
  std::vector<std::vector<uint32_t>> fresh(workers, std::vector<uint32_t>((kTwoHopRoom + 2) * M0_));
  const auto expand = [&](const auto& allowed) {
    for (size_t from = 0; from < ids.size(); from += kBlock) {
      const size_t len = std::min(kBlock, ids.size() - from);
      parallel_for(0, len, (long long)workers, [&](size_t i, size_t w) {
        auto vis = visited_.borrow();
        vis->test_and_set(ids[from + i]);  // not its own neighbour
        sizes[i] = uint32_t(take_twohop0(ids[from + i], *vis, allowed, fresh[w].data()));
        std::copy(fresh[w].begin(), fresh[w].begin() + sizes[i], block.begin() + i * room);
      });
      for (size_t i = 0; i < len; ++i) {
        first[from + i] = uint32_t(graph.links.size());
        graph.links.insert(graph.links.end(), block.begin() + i * room, block.begin() + i * room + sizes[i]);
      }
    }
  };
  if (store_.deleted_count() == 0)
    expand(RowBits{rows.words, rows.n_words});
  else
    expand([&](uint32_t id) { return rows.test(id) && !store_.is_deleted(id); });
  first[ids.size()] = uint32_t(graph.links.size());
  graph.links.shrink_to_fit();
  graph.begin.resize(n + 1);
  for (size_t id = 0, j = 0; id <= n; ++id) {  // a filtered-out element's list: empty, where the next one's starts
    while (j < ids.size() && ids[j] < id) ++j;
    graph.begin[id] = first[j];
  }
}

std::shared_ptr<CompiledFilter> Hnsw::compile_filter(const uint64_t* words, size_t n_words, int num_threads) const {
  std::shared_lock<SharedMutex> g(mu_);
  auto out = std::make_shared<CompiledFilter>();
  out->index = instance_;
  out->epoch = epoch();  // read first: an add that starts during the build makes the graph unused
  out->ext_words.assign(words, words + n_words);
  out->rows = AllowedRows::from_external(store_, out->ext_words.data(), out->ext_words.size());
  const size_t live = count() - std::min(count(), store_.deleted_count());
  if (out->rows.count >= kMinGraphRows && double(out->rows.count) < kTwoHopShare * double(live)) {
    link_allowed(out->rows, num_threads, out->graph);
    if (out->graph.built()) out->rows.graph = &out->graph;
    out->rows.clumping = allowed_clumping(out->rows, double(out->rows.count) / double(std::max<size_t>(1, live)));
  }
  return out;
}

template <class Allowed, class Expand>
std::vector<Candidate> Hnsw::walk_allowed(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps, size_t n_eps,
                                          size_t ef, const Allowed& allowed, Expand&& expand) const {
  auto vis = visited_.borrow();
  SearchPool& pool = s.pool;  // allowed elements only: every element scored is one
  pool.reset(std::min(ef, store_.count()));
  s.fresh.resize((kTwoHopRoom + 2) * M0_);  // take_twohop0's room, then its two lists
  uint32_t* fresh = s.fresh.data();
  const auto keep = [&](float d, uint32_t id) { pool.insert(d, id); };
  const auto score = [&](size_t m) { score_fresh(ctx, fresh, m, keep); };
  for (size_t e = 0; e < n_eps; ++e) {  // a filtered-out entry point is expanded at once, never kept
    if (vis->test_and_set(eps[e])) continue;
    if (allowed(eps[e]))
      pool.insert(store_.distance(ctx, eps[e]), eps[e]);
    else
      score(take_twohop0(eps[e], *vis, allowed, fresh));
  }
  while (pool.has_unexpanded()) {
    const uint32_t id = pool.expand_next();
    uint32_t next;
    score(expand(id, pool.peek_next(next) ? next : kNone, *vis, fresh));
  }
  std::vector<Candidate> found(pool.size());
  for (size_t i = 0; i < found.size(); ++i) found[i] = {pool.distance(i), pool.id(i)};
  return found;
}

template <class Visit>
void Hnsw::walk_pool(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps, size_t n_eps, size_t ef,
                     Visit&& visit) const {
  auto vis = visited_.borrow();
  // The pool never holds more than the stored elements; an ef past them (user input or a file's
  // default) must not reserve memory for it.
  SearchPool& pool = s.pool;
  pool.reset(std::min(ef, store_.count()));
  const auto score = [&](float d, uint32_t id) {
    pool.insert(d, id);
    visit(d, id);
  };
  for (size_t e = 0; e < n_eps; ++e)
    if (!vis->test_and_set(eps[e])) score(store_.distance(ctx, eps[e]), eps[e]);
  s.fresh.resize(std::max(p_.M, M0_));
  uint32_t* fresh = s.fresh.data();
  while (pool.has_unexpanded()) {
    const uint32_t id = pool.expand_next();
    uint32_t next;
    if (pool.peek_next(next)) store_.prefetch_links0(next);  // most often the one expanded next
    score_fresh(ctx, fresh, take_unvisited0(id, *vis, fresh), score);
  }
}

std::vector<Candidate> Hnsw::search_layer0_pool(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps,
                                                size_t n_eps, size_t ef) const {
  walk_pool(s, ctx, eps, n_eps, ef, [](float, uint32_t) {});
  const SearchPool& pool = s.pool;
  std::vector<Candidate> found(pool.size());
  for (size_t i = 0; i < found.size(); ++i) found[i] = {pool.distance(i), pool.id(i)};
  return found;
}

double Hnsw::filter_met_on_walk(SearchScratch& s, const QueryCtx& ctx, const uint32_t* eps, size_t n_eps, size_t ef,
                                const ElementFilter& filter, double share) const {
  TopK top(ef);
  size_t tested = 0, passed = 0;
  walk_pool(s, ctx, eps, n_eps, ef, [&](float d, uint32_t id) {
    if (!(d < top.bound())) return;  // farther than the ef-th allowed one met: not tested
    ++tested;
    if (!filter.stored_ok(id)) return;
    ++passed;
    top.offer(d, id, filter);
  });
  // Among the elements tested (every one until ef allowed are met, then those closer than the ef-th): about 1, the
  // allowed elements around the query are as dense as anywhere. Far less: the filter is correlated with the query
  // (its allowed rows lie elsewhere).
  return double(passed) / std::max(1.0, share * double(tested));
}

template <class Allowed>
void Hnsw::count_allowed_links(uint32_t id, const Allowed& allowed, size_t& seen, size_t& passed) const {
  const size_t limit = store_.capacity();
  const uint32_t n = store_.link_count0(id);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t nb = store_.link0(id, i);
    if (nb >= limit) continue;
    ++seen;
    passed += allowed(nb);
  }
}

double Hnsw::allowed_met_near(const uint32_t* eps, size_t n_eps, const ElementFilter& filter, double share) const {
  size_t seen = 0, passed = 0;
  const size_t limit = store_.capacity();
  const auto probe = [&](uint32_t id) {
    count_allowed_links(id, [&](uint32_t nb) { return filter.stored_ok(nb); }, seen, passed);
  };
  for (size_t e = 0; e < n_eps; ++e) probe(eps[e]);
  // Too few links to tell (a small ef's narrow beam): the links of the entry points' neighbours too, until enough
  // are expected allowed. Before, such queries walked first at 1M x 384, 10% correlated, and scanned after the walk
  // ran over its budget: p99 106 ms against a 7 ms scan.
  for (size_t e = 0; e < n_eps && share * double(seen) < kMetProbeExpected; ++e) {
    const uint32_t n = store_.link_count0(eps[e]);
    for (uint32_t i = 0; i < n && share * double(seen) < kMetProbeExpected; ++i)
      if (store_.link0(eps[e], i) < limit) probe(store_.link0(eps[e], i));
  }
  const double expected = share * double(seen);
  return expected < kMetProbeExpected ? 1.0 : double(passed) / expected;
}

double Hnsw::allowed_clumping(const AllowedRows& rows, double share) const {
  size_t seen = 0, passed = 0;
  const size_t limit = store_.capacity();
  const auto probe = [&](uint32_t id) {
    count_allowed_links(id, [&](uint32_t nb) { return rows.test(nb); }, seen, passed);
  };
  // kClumpSamples allowed elements spread over the slots: the first set bit from each of as many equal stretches
  // of the words (or of the listed ids). The same filter always reads the same ones.
  if (!rows.listed.empty()) {
    for (size_t i = 0; i < kClumpSamples; ++i) probe(rows.listed[i * rows.listed.size() / kClumpSamples]);
  } else {
    const size_t n_words = std::min(rows.n_words, (limit + 63) / 64);
    for (size_t i = 0, w = 0; i < kClumpSamples; ++i, ++w) {
      w = std::max(w, i * n_words / kClumpSamples);
      while (w < n_words && rows.words[w] == 0) ++w;
      if (w == n_words) break;
      const size_t id = w * 64 + size_t(__builtin_ctzll(rows.words[w]));
      if (id < limit) probe(uint32_t(id));
    }
  }
  return double(passed) / std::max(1.0, share * double(seen));
}

void Hnsw::push_distances(uint32_t base, const uint32_t* ids, size_t n, size_t keep, MaxHeap& out) const {
  const size_t ahead = store_.prefetch_ahead();
  for (size_t i = 0; i < std::min(n, ahead); ++i) store_.prefetch(ids[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + ahead < n) store_.prefetch(ids[i + ahead]);
    if (ids[i] == base) continue;
    out.emplace(store_.distance_between(base, ids[i]), ids[i]);
    if (out.size() > keep) out.pop();
  }
}

// hnswlib's getNeighborsByHeuristic2 (keep a candidate only if it is closer
// to the base element than to every neighbour already kept), then, while the
// list has room, the candidates it dropped that pass the rule relaxed by
// prune_alpha (Vamana's RobustPrune: dropped only when a kept neighbour is
// closer to them by that factor), closest first. The relaxed links are only
// added to hnswlib's, never put in their place: applied in one pass, the
// relaxed rule fills lists with near links and crowds out the far ones that
// make the graph navigable on high intrinsic dimension (bench/RESULTS.md).
// Relaxed links fill a list to 1 - 1/kRelaxedSlack of its capacity only: the
// rest takes later back links by appending, where a full list re-runs this
// selection for every back link (filled to the brim, builds took 25-120%
// longer than alpha 1's; with the slack 2-22%, for most of the recall gain).
// The factor applies to squared Euclidean distances: between the points for
// L2, between the directions (1 - cosine) for inner products and cosine, each
// inner product divided by the norms of both elements when they vary
// (norm_range.h), or by the common squared norm when they do not.
void Hnsw::select_neighbors(MaxHeap& top, size_t m, uint32_t base) const {
  if (top.size() < m) return;
  const bool ip = store_.space() != Space::L2;  // cosine too (unit vectors: its norm range stays empty)
  const bool angular = ip && norms_.varied();
  auto norm_of = [this](uint32_t e) { return std::max(store_.ip_norm(e), 1e-30f); };  // zero vectors too
  const float base_norm = angular ? norm_of(base) : 1.f;
  const float common_norm2 = ip && !angular ? norms_.common_norm2() : 1.f;
  // distance -> the squared-distance scale alpha applies to (an inner product's -ip -> 1 - cosine)
  auto spread = [&](float dist, float norm_a, float norm_b) {
    if (!ip) return dist;
    return 1.f + dist / (angular ? norm_a * norm_b : common_norm2);
  };
  struct Pick {
    Candidate c;
    float norm, to_base;
    float to_blocker;  // spread to the first kept element that dropped it
  };
  std::vector<Pick> kept, dropped;
  kept.reserve(m);
  // Spread to p from the first kept element that is closer to p than p's spread to the base / alpha: the rule
  // drops p because of it. Infinity when there is none: p passes.
  auto blocker = [&](const Pick& p, float alpha) -> float {
    for (size_t j = 0; j < kept.size(); ++j) {
      const float to_kept = spread(store_.distance_between(kept[j].c.second, p.c.second), kept[j].norm, p.norm);
      if (alpha * to_kept < p.to_base) return to_kept;
    }
    return std::numeric_limits<float>::infinity();
  };
  MaxHeap closest;  // (-distance, id)
  while (!top.empty()) {
    closest.emplace(-top.top().first, top.top().second);
    top.pop();
  }
  while (!closest.empty() && kept.size() < m) {
    Pick p;
    p.c = {-closest.top().first, closest.top().second};
    closest.pop();
    if (!closest.empty()) store_.prefetch(closest.top().second);
    p.norm = angular ? norm_of(p.c.second) : 1.f;
    p.to_base = spread(p.c.first, base_norm, p.norm);
    p.to_blocker = blocker(p, 1.f);
    (p.to_blocker == std::numeric_limits<float>::infinity() ? kept : dropped).push_back(p);
  }
  const float alpha = p_.prune_alpha;
  const size_t relaxed_cap = m - m / kRelaxedSlack;
  for (size_t i = 0; i < dropped.size() && kept.size() < relaxed_cap && alpha > 1.f; ++i) {
    const Pick& p = dropped[i];
    if (alpha * p.to_blocker < p.to_base) continue;  // its first blocker still blocks it
    // Every element kept so far, hnswlib's and the relaxed ones, against the relaxed rule.
    if (blocker(p, alpha) == std::numeric_limits<float>::infinity()) kept.push_back(p);
  }
  for (const Pick& k : kept) top.emplace(k.c);
}

std::vector<uint32_t> Hnsw::set_own_links(uint32_t id, MaxHeap& top, int level) {
  select_neighbors(top, max_links(level), id);
  std::vector<uint32_t> selected;
  selected.reserve(top.size());
  while (!top.empty()) {  // farthest first: the last one is the closest
    selected.push_back(top.top().second);
    top.pop();
  }
  std::lock_guard<std::mutex> g(link_lock(id));
  set_links(id, level, selected.data(), uint32_t(selected.size()));
  return selected;
}

bool Hnsw::add_backlink(uint32_t id, uint32_t other, int level, bool is_update) {
  if (other == id || level > level_of(other)) return false;  // cannot happen; never corrupt the graph
  std::lock_guard<std::mutex> g(link_lock(other));
  std::vector<uint32_t> buf;
  read_links(other, level, buf);
  if (is_update && std::find(buf.begin(), buf.end(), id) != buf.end()) return true;
  bool kept = true;
  if (buf.size() < max_links(level)) {
    buf.push_back(id);
  } else {
    MaxHeap cands;
    cands.emplace(store_.distance_between(id, other), id);
    push_distances(other, buf.data(), buf.size(), SIZE_MAX, cands);
    select_neighbors(cands, max_links(level), other);
    buf.clear();
    kept = false;
    for (; !cands.empty(); cands.pop()) {
      buf.push_back(cands.top().second);
      kept |= cands.top().second == id;
    }
  }
  set_links(other, level, buf.data(), uint32_t(buf.size()));
  return kept;
}

// When every full list re-selects its links without `id`, nothing links to it
// at that level and a search cannot return it until the next connectivity
// pass (which a small add may not trigger): it then takes the place of the
// farthest link of its nearest neighbour (`selected` is farthest first).
void Hnsw::add_backlinks(uint32_t id, const std::vector<uint32_t>& selected, int level, bool is_update) {
  bool linked = false;
  for (uint32_t other : selected) linked |= add_backlink(id, other, level, is_update);
  if (!linked && level == 0 && !selected.empty()) replace_farthest_link(selected.back(), id);
}

// Links `id` at levels min(level, max_level)..0 starting from `ep`. Its own
// lists are written top-down first and the back links (which make it
// reachable) bottom-up afterwards, so a concurrent search that reaches it
// through an upper level always finds its level-0 links in place.
void Hnsw::link_element(uint32_t id, const QueryCtx& ctx, uint32_t ep, int level, int max_level, bool is_update) {
  uint32_t cur = ep;
  if (level < max_level) cur = greedy_descent(ctx, ep, max_level, level, true);
  std::vector<std::vector<uint32_t>> selected(size_t(std::min(level, max_level) + 1));
  for (int lc = std::min(level, max_level); lc >= 0; --lc) {
    MaxHeap top = search_layer_build(ctx, cur, lc, id);
    if (top.empty()) continue;  // every reachable element is deleted
    selected[lc] = set_own_links(id, top, lc);
    cur = selected[lc].back();
  }
  for (int lc = 0; lc < int(selected.size()); ++lc) add_backlinks(id, selected[lc], lc, is_update);
}

// ---------------------------------------------------------------------------
// Insertion

void Hnsw::insert(uint32_t id, const float* x, int level) {
  QueryCtx ctx;
  store_.prepare_query(x, ctx);
  std::unique_lock<std::mutex> ep_lock(ep_mu_);
  const uint64_t state = ep_state_.load();
  const uint32_t ep = uint32_t(state);
  const int max_level = int(int32_t(state >> 32));
  if (level <= max_level) ep_lock.unlock();
  if (ep == kNone) {
    ep_state_.store(pack_ep(id, level));
    return;
  }
  link_element(id, ctx, ep, level, max_level, false);
  if (level > max_level) ep_state_.store(pack_ep(id, level));
}

std::vector<uint32_t> Hnsw::links_copy(uint32_t id, int level) const {
  std::lock_guard<std::mutex> g(link_lock(id));
  std::vector<uint32_t> out;
  read_links(id, level, out);
  return out;
}

// After `id` moved, its old neighbours still point at it and their lists were
// chosen around its old position. As hnswlib's updatePoint does, each old
// neighbour re-selects its links (same heuristic) from the old neighbourhood:
// `id`, its neighbours and their neighbours. Without this, recall decays as
// vectors are updated (measured: 0.75 -> 0.64 after three rounds updating a
// third of 20k vectors, where hnswlib keeps 0.80).
void Hnsw::repair_neighbours(uint32_t id) {
  for (int lc = 0; lc <= level_of(id); ++lc) {
    const std::vector<uint32_t> one_hop = links_copy(id, lc);
    if (one_hop.empty()) continue;
    std::vector<uint32_t> pool(one_hop);
    pool.push_back(id);
    for (uint32_t nb : one_hop) {
      const std::vector<uint32_t> two_hop = links_copy(nb, lc);
      pool.insert(pool.end(), two_hop.begin(), two_hop.end());
    }
    std::sort(pool.begin(), pool.end());
    pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
    const size_t keep = std::min(p_.ef_construction, pool.size() - 1);
    std::vector<uint32_t> buf;
    for (uint32_t nb : one_hop) {
      MaxHeap cands;
      push_distances(nb, pool.data(), pool.size(), keep, cands);
      select_neighbors(cands, max_links(lc), nb);
      buf.clear();
      while (!cands.empty()) {
        buf.push_back(cands.top().second);
        cands.pop();
      }
      std::lock_guard<std::mutex> g(link_lock(nb));
      set_links(nb, lc, buf.data(), uint32_t(buf.size()));
    }
  }
}

// Re-links an existing element after its vector changed (update or reuse of
// a deleted slot): its old neighbours are repaired, then it is linked like a
// re-insertion at its own level.
void Hnsw::relink(uint32_t id, const float* x) {
  QueryCtx ctx;
  store_.prepare_query(x, ctx);
  const uint64_t state = ep_state_.load();
  const uint32_t ep = uint32_t(state);
  const int max_level = std::min<int>(int(int32_t(state >> 32)), level_of(ep));
  if (ep == kNone || (ep == id && count() == 1)) return;
  repair_neighbours(id);
  link_element(id, ctx, ep, level_of(id), max_level, true);
}

// faiss's hnsw_add_vertices inserts a batch from the highest level down. The
// few upper-level elements then go first into a sparse graph, so their level-0
// links span the whole data set, and every later element descends through
// complete upper levels. Rows of one level keep their order (stable sort).
std::vector<size_t> Hnsw::insertion_order(const std::vector<int>& level) {
  std::vector<size_t> order(level.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return level[a] > level[b]; });
  return order;
}

void Hnsw::train(const float* sample, size_t n) {
  std::unique_lock<SharedMutex> g(mu_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot train");
  if (store_.count() > 0) throw std::runtime_error("train() must be called before the first add");
  store_.train(sample, n);
}

void Hnsw::add(const float* data, size_t n, const uint64_t* ids, const std::vector<std::vector<uint32_t>>* labels,
               int num_threads, bool update, bool replace_deleted) {
  if (n == 0) return;
  if (labels && labels->size() != n) throw std::invalid_argument("labels must have one entry per row");
  std::shared_lock<SharedMutex> g(mu_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot add items");
  const InFlight in_flight(adds_in_flight_);
  const EpochBump bump(epoch_);  // compiled filters' graphs stop being used from here
  if (replace_deleted && !p_.allow_replace_deleted)
    throw std::runtime_error("Replacement of deleted elements is disabled in constructor");
  const size_t dim = p_.dim;
  std::vector<float> buf;
  for (size_t i = 0; i < n; ++i) store_.prepare_input(data + i * dim, buf);  // rejects zero cosine rows up front

  // Plan: which rows update an existing element, which take a free slot.
  std::vector<uint64_t> ext(n);
  for (size_t i = 0; i < n; ++i) ext[i] = ids ? ids[i] : uint64_t(store_.count() + i);
  check_ext_ids(ext.data(), n);
  {
    std::unordered_set<uint64_t> seen;
    seen.reserve(n * 2);
    for (uint64_t e : ext)
      if (!seen.insert(e).second) throw std::invalid_argument("duplicate id " + std::to_string(e) + " in one add call");
  }
  enum Kind : uint8_t { kNew, kUpdate, kReplace };
  std::vector<Kind> kind(n, kNew);
  std::vector<uint32_t> slot(n, kNone);
  size_t n_new = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t id;
    if (store_.find(ext[i], id)) {
      if (!update) throw std::invalid_argument("id " + std::to_string(ext[i]) + " already exists (pass update=True to overwrite it)");
      if (store_.is_deleted(id) && p_.allow_replace_deleted)
        throw std::runtime_error("Can't use addPoint to update deleted elements if replacement of deleted elements is enabled.");
      kind[i] = kUpdate;
      slot[i] = id;
    } else {
      ++n_new;
    }
  }
  if (replace_deleted) {
    std::lock_guard<std::mutex> dg(deleted_mu_);
    for (size_t i = 0; i < n && !deleted_slots_.empty(); ++i) {
      if (kind[i] != kNew) continue;
      kind[i] = kReplace;
      slot[i] = deleted_slots_.back();
      deleted_slots_.pop_back();
      --n_new;
    }
  }
  if (store_.space() == Space::IP) {  // before any of these rows is linked
    if (!norms_.known() && store_.count() > 0)  // loaded from a file
      norms_.note_stored(store_.count(), [this](size_t i) { return store_.ip_norm(uint32_t(i)); });
    norms_.note_rows(data, n, dim);
  }
  // Train the int8 centre on the first batch (before any element is encoded).
  if (!store_.trained()) {
    std::lock_guard<std::mutex> tg(train_mu_);
    if (!store_.trained()) {
      const size_t rows = n >= VectorStore::kMinTrainRows ? std::min(n, VectorStore::kTrainRows) : 0;
      store_.train(data, rows);
    }
  }
  if (n_new) {
    std::vector<uint64_t> new_ext;
    new_ext.reserve(n_new);
    for (size_t i = 0; i < n; ++i)
      if (kind[i] == kNew) new_ext.push_back(ext[i]);
    uint32_t first;
    try {
      first = store_.allocate(new_ext.data(), n_new);
    } catch (...) {
      if (replace_deleted) {  // give the taken slots back
        std::lock_guard<std::mutex> dg(deleted_mu_);
        for (size_t i = 0; i < n; ++i)
          if (kind[i] == kReplace) deleted_slots_.push_back(slot[i]);
      }
      throw;
    }
    for (size_t i = 0; i < n; ++i)
      if (kind[i] == kNew) slot[i] = first++;
  }
  for (size_t i = 0; i < n; ++i)
    if (kind[i] == kReplace) store_.rebind(slot[i], ext[i]);

  // Levels of new elements are drawn in row order, so the seed alone fixes them.
  std::vector<int> level(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (kind[i] == kNew) level[i] = random_level();
  const std::vector<size_t> order = insertion_order(level);
  parallel_for(0, n, num_threads, [&](size_t oi, size_t) {
    const size_t i = order[oi];
    std::vector<float> local;
    const float* x = store_.prepare_input(data + i * dim, local);
    const uint32_t id = slot[i];
    const std::vector<uint32_t>* row_labels = labels ? &(*labels)[i] : nullptr;
    if (kind[i] == kNew) {
      allocate_upper(id, level[i]);
      store_.encode(id, x);
      if (row_labels) assign_labels(store_, labels_, id, normalise_labels(*row_labels));
      insert(id, x, level[i]);
      return;
    }
    {
      std::lock_guard<std::mutex> lg(link_lock(id));
      store_.encode(id, x);
    }
    if (row_labels)
      assign_labels(store_, labels_, id, normalise_labels(*row_labels));
    else if (kind[i] == kReplace)
      assign_labels(store_, labels_, id, {});
    relink(id, x);
    if (store_.set_deleted(id, false)) store_.note_deleted_delta(-1);
  });
  check_connectivity(n);
}

// The pass costs one visit per link, so it runs once the rows added since the
// last one reach 1/kConnectivityEvery of the index (amortised: kConnectivity-
// Every * 2M link visits per added row, little next to inserting it), and only
// when no other add is in flight: an element another call has allocated but
// not linked yet would look unreachable.
void Hnsw::check_connectivity(size_t rows) {
  const size_t n = count();
  const size_t since = unchecked_rows_.fetch_add(rows) + rows;
  if (since * kConnectivityEvery < n || adds_in_flight_.load() != 1) return;
  std::unique_lock<std::mutex> g(connect_mu_, std::try_to_lock);
  if (!g.owns_lock()) return;
  unchecked_rows_.store(0);
  connect_unreachable(n);
}

// ---------------------------------------------------------------------------
// Connectivity

// The diversity heuristic can leave an element that no level-0 path from the
// entry point reaches: every list that linked to it later preferred closer,
// better spread neighbours. A search then never returns it (hnswlib and faiss
// leave such elements be). A depth-first pass from the entry point finds them;
// each is linked from its nearest reachable element, and whatever it links to
// needs no repair of its own.
void Hnsw::connect_unreachable(size_t n) {
  const uint32_t ep = entry_point();
  if (ep == kNone) return;
  auto seen = visited_.borrow();
  mark_reachable(ep, *seen);
  for (uint32_t id = 0; id < n; ++id) {
    if (seen->visited(id) || store_.is_deleted(id)) continue;
    link_from_nearest(id);
    mark_reachable(id, *seen);
  }
}

void Hnsw::mark_reachable(uint32_t from, VisitedList& seen) const {
  std::vector<uint32_t> stack{from}, nbs;
  seen.test_and_set(from);
  while (!stack.empty()) {
    const uint32_t id = stack.back();
    stack.pop_back();
    read_links(id, 0, nbs);
    for (uint32_t nb : nbs)
      if (!seen.test_and_set(nb)) stack.push_back(nb);
  }
}

// Searches from the entry point for `id`'s own (decoded) vector, so every
// element found is reachable, and offers `id` to the nearest lists in turn
// under the usual heuristic; when all of them prefer their links, `id` takes
// the place of the nearest one's farthest link.
void Hnsw::link_from_nearest(uint32_t id) {
  std::vector<float> x(p_.dim);
  store_.decode(id, x.data());
  QueryCtx ctx;
  store_.prepare_query(x.data(), ctx);
  const uint64_t state = ep_state_.load();
  const uint32_t ep = uint32_t(state);
  const int max_level = std::min<int>(int(int32_t(state >> 32)), level_of(ep));
  MaxHeap top = search_layer_build(ctx, greedy_descent(ctx, ep, max_level, 0, true), 0, id);
  while (top.size() > p_.M) top.pop();
  std::vector<uint32_t> nearest(top.size());
  for (size_t i = nearest.size(); i-- > 0; top.pop()) nearest[i] = top.top().second;
  for (uint32_t other : nearest)
    if (add_backlink(id, other, 0, true)) return;
  if (!nearest.empty()) replace_farthest_link(nearest.front(), id);
}

void Hnsw::replace_farthest_link(uint32_t other, uint32_t id) {
  std::lock_guard<std::mutex> g(link_lock(other));
  std::vector<uint32_t> buf;
  read_links(other, 0, buf);
  if (buf.empty()) return;
  MaxHeap by_distance;
  push_distances(other, buf.data(), buf.size(), SIZE_MAX, by_distance);
  std::replace(buf.begin(), buf.end(), by_distance.top().second, id);
  set_links(other, 0, buf.data(), uint32_t(buf.size()));
}

// ---------------------------------------------------------------------------
// Queries

std::vector<Candidate> Hnsw::search_prepared(const QueryCtx& ctx, size_t k, size_t ef, const LabelQuery* lq,
                                             const IdPredicate* predicate, const AllowedRows* rows) const {
  ScratchLease scratch;
  return search_with(*scratch, ctx, k, ef, lq, predicate, rows);
}

size_t Hnsw::walk_budget(const LabelQuery* lq, const AllowedRows* rows) const {
  size_t allowed_max = lq ? labels_.upper_bound(*lq) : SIZE_MAX;
  if (rows) allowed_max = std::min(allowed_max, rows->count);
  return allowed_max;
}

bool Hnsw::plan_exact(size_t allowed_max, double scan_rows, size_t ef, const LabelQuery* lq, const AllowedRows* rows,
                      std::vector<uint32_t>& ids, bool forced) const {
  const size_t live = std::max<size_t>(1, count() - deleted_count());
  const double selectivity = std::min(1.0, double(allowed_max) / double(live));
  // The graph search keeps only allowed elements in its result list, so it
  // expands about ef / selectivity nodes of ~M fresh neighbours each; the
  // exact scan costs one evaluation per allowed element (the sketch scan
  // less: scan_rows). The factor 0.75 is calibrated on 200k x 768 int8
  // (bench/ann.py --filter-only, RESULTS.md): exact wins at 2% and 5% allowed,
  // the graph at 10% (exact over 20k elements no longer runs from cache).
  const double graph_cost = double(ef) / selectivity * kGraphCostPerNode * double(p_.M);
  if (!forced && scan_rows > filter_exact_factor_ * graph_cost) return false;
  if (rows && (!lq || rows->count <= labels_.upper_bound(*lq))) {  // the shorter list; the filter checks the other
    rows->ids(ids);
    return true;
  }
  ids.clear();
  ids.reserve(allowed_max);
  labels_.collect(*lq, ids);
  if (lq->labels.size() > 1) {  // an element with several query labels is listed once per label
    auto vis = visited_.borrow();  // O(n) de-duplication that keeps the lists' (ascending) order
    size_t kept = 0;
    for (uint32_t id : ids)
      if (!vis->test_and_set(id)) ids[kept++] = id;
    ids.resize(kept);
  }
  return true;
}

std::vector<Candidate> Hnsw::scan_allowed(const QueryCtx& ctx, const ElementFilter& filter,
                                          const std::vector<uint32_t>& ids, size_t k, size_t ef) const {
  if (sketch_scan_applies(store_, filter, ids.size(), k, ef))
    return sketch_topk(store_, ctx, filter, ids.data(), ids.size(), k, ef, store_.keep_float());
  return exact_topk(store_, ctx, filter, ids.data(), ids.size(), k, store_.keep_float());
}

std::vector<Candidate> Hnsw::search_with(SearchScratch& scratch, const QueryCtx& ctx, size_t k, size_t ef,
                                         const LabelQuery* lq, const IdPredicate* predicate,
                                         const AllowedRows* rows) const {
  if (k == 0) return {};
  const uint64_t state = ep_state_.load();
  const uint32_t ep = uint32_t(state);
  if (ep == kNone) return {};
  ef = std::max(ef, k);
  ElementFilter filter{&store_, &labels_, lq, predicate, rows};
  double scan_rows = 0;  // what a scan of the allowed elements costs, in exact-scan rows
  if (lq || rows) {
    const size_t allowed_max = walk_budget(lq, rows);
    if (allowed_max == 0) return {};
    scan_rows = scan_cost(store_, filter, allowed_max, k, ef);
    std::vector<uint32_t>& ids = scratch.scan_ids;
    if (plan_exact(allowed_max, scan_rows, ef, lq, rows, ids)) return scan_allowed(ctx, filter, ids, k, ef);
  }
  const int max_level = std::min<int>(int(int32_t(state >> 32)), level_of(ep));
  // Layer 0 starts from the best elements of a beam search on layer 1, ef / 8 of them unless set
  // (entry_beam_for; a width of 1 is one greedy descent): a single descent sometimes ends in the wrong
  // cluster, which only a much larger ef escapes.
  // A row filter from kTwoHopShare up is walked keeping ef allowed elements (the screened walk), as far as an
  // unfiltered walk keeping ef / share: its entry beam is that walk's (at 1M x 768, 50% random, ef 32: recall
  // 0.943 against 0.913 with the beam of ef 32).
  const double share = rows ? double(rows->count) / double(std::max<size_t>(1, count())) : 1.0;
  const bool wide_rows = rows && !predicate && share >= kTwoHopShare;
  const size_t beam = entry_beam_for(wide_rows ? size_t(double(ef) / share) : ef);
  const ElementFilter* screen = filter.restricts() ? &filter : nullptr;
  const std::vector<uint32_t>& starts = scratch.starts;
  scratch.starts.clear();
  uint32_t start = kNone;
  if (beam > 1 && max_level >= 1)
    beam_upper(scratch, ctx, greedy_descent(ctx, ep, max_level, 1, false), 1, beam);
  else  // the classic path: one entry point
    start = greedy_descent(ctx, ep, max_level, 0, false);
  const uint32_t* eps = starts.empty() ? &start : starts.data();
  const size_t n_eps = starts.empty() ? 1 : starts.size();
  std::vector<Candidate> found;
  const auto finish = [&](std::vector<Candidate>& out) {
    if (store_.keep_float()) {  // recall recovery: exact float32 re-score of the ef candidates
      for (Candidate& c : out) c.first = store_.exact_distance(ctx, c.second);
      std::sort(out.begin(), out.end());
    }
    if (out.size() > k) out.resize(k);
    return std::move(out);
  };
  if (screen || store_.deleted_count() > 0) {
    // The exact scan of the allowed elements (the planner's, forced). A factor of 0 forces the walk instead.
    const bool may_scan = (lq || rows) && filter_exact_factor_ > 0;
    const auto scan = [&] {
      std::vector<uint32_t>& ids = scratch.scan_ids;
      plan_exact(walk_budget(lq, rows), scan_rows, ef, lq, rows, ids, /*forced=*/true);
      return scan_allowed(ctx, filter, ids, k, ef);
    };
    if (rows && !predicate) {
      // How often a walk meets the allowed elements around the query, against their share of the index (1: as
      // often as anywhere). Far less: the filter is correlated with the query, its allowed elements lie elsewhere
      // and a walk from here ends among the wrong ones: the scan answers.
      const double met_near = may_scan ? allowed_met_near(eps, n_eps, filter, share) : 1.0;
      if (met_near < kDisjointMet) return scan();
      if (share >= kTwoHopShare) {
        // Rare beside the entry points: the unfiltered walk tells how rare around the query.
        if (met_near < kWideProbeMet && filter_met_on_walk(scratch, ctx, eps, n_eps, ef, filter, share) < kWideWalkMet)
          return scan();
      } else {
        // Allowed elements gathered in places (each one's neighbours allowed kClumped times as often as the
        // filter's share) with the query outside them: a walk from here ends in the wrong place.
        if (may_scan) {
          const double clumping = rows->clumping > 0 ? rows->clumping : allowed_clumping(*rows, share);
          if (clumping >= kClumped && met_near < kInClump * clumping) return scan();
        }
        // Walk the allowed part of the graph only (two-hop expansion); when that walk finds fewer than it should
        // (the allowed rows cut off from the entry), the screened walk below runs.
        found = search_layer0_twohop(scratch, ctx, eps, n_eps, ef, filter);
        if (!found.empty() && found.size() >= std::min(ef, rows->count)) return finish(found);
      }
    }
    // The screened walk: every element guides it, the allowed ones are kept. A filter correlated with the query
    // leaves the allowed rows far from where the walk starts, and the walk scores many more elements than the
    // planner's estimate: once it has cost as much as scanning the allowed rows would, the walk stops and the
    // scan answers (a search costs at most about two scans).
    bool over = false;
    const size_t budget = may_scan ? size_t(scan_rows / double(kWalkEvalCost)) : SIZE_MAX;
    found = search_layer0_screened(scratch, ctx, eps, n_eps, ef, screen, budget, &over);
    if (over) return scan();
  } else {
    found = search_layer0_pool(scratch, ctx, eps, n_eps, ef);
  }
  return finish(found);
}

std::vector<Candidate> Hnsw::search_internal(const float* query, size_t k, size_t ef, const LabelQuery* lq,
                                             const IdPredicate* predicate, const AllowedRows* rows) const {
  ScratchLease scratch;
  store_.prepare_query(query, scratch->ctx);
  return search_with(*scratch, scratch->ctx, k, ef, lq, predicate, rows);
}

std::optional<AllowedRows> Hnsw::compile_rows(const ExternalBits* allowed) const {
  if (!allowed) return std::nullopt;
  return AllowedRows::from_external(store_, allowed->words, allowed->n_words);
}

void Hnsw::search(const float* queries, size_t nq, size_t k, const size_t* ef, size_t n_ef, const LabelQuery* lq,
                  const IdPredicate* predicate, int num_threads, int64_t* out_ids, float* out_scores,
                  const ExternalBits* allowed, const CompiledFilter* compiled) const {
  if (ef && n_ef != 1 && n_ef != nq) throw std::invalid_argument("ef must be one value or one per query");
  if (compiled && compiled->index != instance_)
    throw std::invalid_argument("allowed: this compiled filter was compiled by another index (compile_filter)");
  std::shared_lock<SharedMutex> g(mu_);
  check_k(k, count());
  // A compiled filter of this epoch is used as it is; an older one's bitset is compiled again, as a plain one.
  const bool current = compiled && compiled->epoch == epoch();
  const ExternalBits own =
      compiled ? ExternalBits{compiled->ext_words.data(), compiled->ext_words.size()} : ExternalBits{};
  const std::optional<AllowedRows> rows = current ? std::nullopt : compile_rows(compiled ? &own : allowed);
  const AllowedRows* rows_p = current ? &compiled->rows : rows ? &*rows : nullptr;
  parallel_for(0, nq, num_threads, [&](size_t i, size_t) {
    const size_t ef_i = ef ? ef[n_ef == 1 ? 0 : i] : ef_.load();
    std::vector<Candidate> found = search_internal(queries + i * p_.dim, k, ef_i, lq, predicate, rows_p);
    write_row(store_, found, k, out_ids + i * k, out_scores + i * k);
  });
}

// ---------------------------------------------------------------------------
// Deletions, items

void Hnsw::mark_deleted(uint64_t ext) {
  std::shared_lock<SharedMutex> g(mu_);
  const EpochBump bump(epoch_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot delete items");
  uint32_t id;
  if (!store_.find(ext, id)) throw std::runtime_error("Label not found");
  if (store_.set_deleted(id, true)) throw std::runtime_error("The requested to delete element is already deleted");
  store_.note_deleted_delta(1);
  if (p_.allow_replace_deleted) {
    std::lock_guard<std::mutex> dg(deleted_mu_);
    deleted_slots_.push_back(id);
  }
}

void Hnsw::unmark_deleted(uint64_t ext) {
  std::shared_lock<SharedMutex> g(mu_);
  const EpochBump bump(epoch_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot undelete items");
  uint32_t id;
  if (!store_.find(ext, id)) throw std::runtime_error("Label not found");
  if (!store_.set_deleted(id, false)) throw std::runtime_error("The requested to undelete element is not deleted");
  store_.note_deleted_delta(-1);
  if (p_.allow_replace_deleted) {
    std::lock_guard<std::mutex> dg(deleted_mu_);
    deleted_slots_.erase(std::remove(deleted_slots_.begin(), deleted_slots_.end(), id), deleted_slots_.end());
  }
}

void Hnsw::set_scan_sketches(bool on) {
  std::unique_lock<SharedMutex> g(mu_);
  store_.keep_sketches(on);
}

void Hnsw::set_allow_replace_deleted(bool allow) {
  std::unique_lock<SharedMutex> g(mu_);
  std::lock_guard<std::mutex> dg(deleted_mu_);
  p_.allow_replace_deleted = allow;
  deleted_slots_.clear();
  if (allow)
    for (uint32_t id = 0; id < store_.count(); ++id)
      if (store_.is_deleted(id)) deleted_slots_.push_back(id);
}

std::vector<uint64_t> Hnsw::ids() const {
  std::shared_lock<SharedMutex> g(mu_);
  std::vector<uint64_t> out(count());
  for (size_t i = 0; i < out.size(); ++i) out[i] = store_.ext_id(uint32_t(i));
  return out;
}

void Hnsw::get_items(const uint64_t* ids, size_t n, float* out) const {
  std::shared_lock<SharedMutex> g(mu_);
  for (size_t i = 0; i < n; ++i) {
    uint32_t id;
    if (!store_.find(ids[i], id) || store_.is_deleted(id)) throw std::runtime_error("Label not found");
    store_.decode(id, out + i * p_.dim);
  }
}

std::vector<uint32_t> Hnsw::labels_of(uint64_t ext) const {
  std::shared_lock<SharedMutex> g(mu_);
  uint32_t id;
  if (!store_.find(ext, id)) throw std::runtime_error("Label not found");
  return element_labels(store_, labels_, id);
}

bool Hnsw::contains(uint64_t ext) const {
  uint32_t id;
  return store_.find(ext, id);
}

bool Hnsw::is_deleted_ext(uint64_t ext) const {
  uint32_t id;
  if (!store_.find(ext, id)) throw std::runtime_error("Label not found");
  return store_.is_deleted(id);
}

size_t Hnsw::memory_bytes() const {
  std::shared_lock<SharedMutex> g(mu_);
  size_t b = store_.memory_bytes() + labels_.memory_bytes();
  b += upper_.capacity() * sizeof(uint32_t*) + levels_.capacity();
  if (!mapping_)
    for (size_t i = 0; i < count(); ++i) b += size_t(levels_[i]) * (p_.M + 1) * sizeof(uint32_t);
  b += deleted_slots_.capacity() * sizeof(uint32_t);
  return b;
}

}  // namespace medretrieve::index
