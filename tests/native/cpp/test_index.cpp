// HNSW and FlatIndex: recall against brute force, labels, deletions, the
// file format's round trip and its rejection of damaged files. These also run
// under ASan/UBSan in CI, so they keep sizes small.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <thread>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "index/file_format.h"
#include "index/flat.h"
#include "index/hnsw.h"
#include "index/vector_store.h"

using namespace medretrieve::index;

namespace {

// Clustered data with a shared offset, like embeddings; the cluster centres
// are the same for every seed so queries come from the data's distribution.
std::vector<float> random_rows(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 crng(12345), rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> centres(8 * dim), out(n * dim);
  for (float& c : centres) c = nd(crng);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < dim; ++j) out[i * dim + j] = 0.5f + centres[(i % 8) * dim + j] + 0.6f * nd(rng);
  return out;
}

// Brute-force top-k ids under the space's similarity.
std::vector<std::vector<int64_t>> brute(const std::vector<float>& x, size_t n, const std::vector<float>& q, size_t nq,
                                        size_t dim, size_t k, Space space) {
  std::vector<std::vector<int64_t>> out(nq);
  for (size_t i = 0; i < nq; ++i) {
    std::vector<std::pair<double, int64_t>> s;
    for (size_t j = 0; j < n; ++j) {
      double v = 0, nq2 = 0, nx2 = 0;
      for (size_t d = 0; d < dim; ++d) {
        const double a = q[i * dim + d], b = x[j * dim + d];
        v += space == Space::L2 ? -(a - b) * (a - b) : a * b;
        nq2 += a * a;
        nx2 += b * b;
      }
      if (space == Space::Cosine) v /= std::sqrt(nq2 * nx2);
      s.emplace_back(-v, int64_t(j));
    }
    std::partial_sort(s.begin(), s.begin() + k, s.end());
    for (size_t t = 0; t < k; ++t) out[i].push_back(s[t].second);
  }
  return out;
}

double recall(const std::vector<int64_t>& ids, const std::vector<std::vector<int64_t>>& truth, size_t k) {
  size_t hit = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    std::set<int64_t> t(truth[i].begin(), truth[i].end());
    for (size_t j = 0; j < k; ++j) hit += t.count(ids[i * k + j]);
  }
  return double(hit) / double(truth.size() * k);
}

std::string temp_path(const char* name) { return "/tmp/medretrieve_test_" + std::to_string(::getpid()) + "_" + name; }

HnswParams params(Space s, DType d, size_t dim, size_t n) {
  HnswParams p;
  p.space = s;
  p.dtype = d;
  p.dim = dim;
  p.max_elements = n;
  p.M = 12;
  p.ef_construction = 80;
  return p;
}

}  // namespace

TEST(Hnsw, RecallAgainstBruteForceEverySpaceAndDtype) {
  const size_t n = 1500, nq = 30, dim = 24, k = 10;
  const auto x = random_rows(n, dim, 1), q = random_rows(nq, dim, 2);
  for (Space s : {Space::L2, Space::IP, Space::Cosine}) {
    const auto truth = brute(x, n, q, nq, dim, k, s);
    for (DType d : {DType::Float32, DType::Int8}) {
      Hnsw h(params(s, d, dim, n));
      h.add(x.data(), n, nullptr, nullptr, 2, false, false);
      std::vector<int64_t> ids(nq * k);
      std::vector<float> sc(nq * k);
      const size_t ef = 100;
      h.search(q.data(), nq, k, &ef, 1, nullptr, nullptr, 1, ids.data(), sc.data());
      const double r = recall(ids, truth, k);
      EXPECT_GE(r, d == DType::Float32 ? 0.97 : 0.9) << medretrieve::metric_name(s) << " " << dtype_name(d);
      for (size_t i = 0; i < nq; ++i)
        for (size_t j = 1; j < k; ++j) EXPECT_GE(sc[i * k + j - 1], sc[i * k + j]);  // best first
    }
  }
}

// The graph a parallel build leaves: lists within their capacity, no self or
// repeated links, upper-level links only to elements of that level, every
// element reachable at level 0 from the entry point (which has the top
// level), and levels fixed by the seed alone (drawn in row order, whatever
// the threads do).
TEST(Hnsw, ParallelBuildLeavesAValidConnectedGraph) {
  const size_t n = 3000, dim = 20;
  const auto x = random_rows(n, dim, 9);
  for (DType d : {DType::Float32, DType::Int8}) {
    HnswParams p = params(Space::L2, d, dim, n);
    p.M = 6;
    Hnsw a(p), b(p);
    a.add(x.data(), n, nullptr, nullptr, 2, false, false);
    b.add(x.data(), n, nullptr, nullptr, 2, false, false);
    const uint32_t ep = a.entry_point();
    EXPECT_EQ(a.level(ep), a.max_level());
    std::vector<char> seen(n, 0);
    std::vector<uint32_t> stack{ep};
    seen[ep] = 1;
    for (uint32_t id = 0; id < n; ++id) {
      ASSERT_EQ(a.level(id), b.level(id)) << id;
      for (int lc = 0; lc <= a.level(id); ++lc) {
        const auto l = a.neighbours(id, lc);
        EXPECT_LE(l.size(), lc ? p.M : 2 * p.M);
        EXPECT_EQ(std::set<uint32_t>(l.begin(), l.end()).size(), l.size()) << "repeated link";
        for (uint32_t nb : l) {
          ASSERT_LT(nb, n);
          EXPECT_NE(nb, id);
          EXPECT_GE(a.level(nb), lc);
        }
      }
    }
    while (!stack.empty()) {
      const uint32_t id = stack.back();
      stack.pop_back();
      for (uint32_t nb : a.neighbours(id, 0))
        if (!seen[nb]) seen[nb] = 1, stack.push_back(nb);
    }
    EXPECT_EQ(size_t(std::count(seen.begin(), seen.end(), 1)), n) << dtype_name(d);
  }
}

// As faiss does, an element picks up to 2M level-0 neighbours of its own (not
// only M) with the diversity heuristic: the element inserted last, which no
// later insertion linked to, shows it. High-dimensional random data keeps
// most candidates diverse, so the heuristic does not stop it below 2M.
TEST(Hnsw, OwnLevelZeroListTakesUpToTwiceM) {
  const size_t n = 400, dim = 64;
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(n * dim);
  for (float& v : x) v = nd(rng);
  HnswParams p = params(Space::L2, DType::Float32, dim, n);
  p.M = 4;
  Hnsw h(p);
  h.add(x.data(), n, nullptr, nullptr, 1, false, false);
  ASSERT_EQ(h.level(n - 1), 0);  // so the last row is the last element inserted
  EXPECT_GT(h.neighbours(n - 1, 0).size(), p.M);
}

// prune_alpha relaxes the diversity rule: above 1 more candidates survive it,
// so level-0 lists hold more links (on every space, inner products and cosine
// compared by direction), recall stays, and the value is checked and saved.
TEST(Hnsw, PruneAlphaKeepsMoreLinks) {
  const size_t n = 1500, nq = 30, dim = 24, k = 10;
  const auto x = random_rows(n, dim, 11), q = random_rows(nq, dim, 12);
  for (Space s : {Space::L2, Space::IP, Space::Cosine}) {
    const auto truth = brute(x, n, q, nq, dim, k, s);
    double mean_links[2];
    for (int relaxed = 0; relaxed < 2; ++relaxed) {
      HnswParams p = params(s, DType::Int8, dim, n);
      p.prune_alpha = relaxed ? 1.2f : 1.f;
      Hnsw h(p);
      h.add(x.data(), n, nullptr, nullptr, 1, false, false);
      size_t links = 0;
      for (uint32_t id = 0; id < n; ++id) links += h.neighbours(id, 0).size();
      mean_links[relaxed] = double(links) / double(n);
      std::vector<int64_t> ids(nq * k);
      std::vector<float> sc(nq * k);
      const size_t ef = 100;
      h.search(q.data(), nq, k, &ef, 1, nullptr, nullptr, 1, ids.data(), sc.data());
      EXPECT_GE(recall(ids, truth, k), 0.9) << medretrieve::metric_name(s) << " alpha " << p.prune_alpha;
      const std::vector<char> bytes = h.to_bytes();
      EXPECT_EQ(Hnsw::from_bytes(bytes.data(), bytes.size())->params().prune_alpha, p.prune_alpha);
    }
    EXPECT_GT(mean_links[1], mean_links[0] * 1.1) << medretrieve::metric_name(s);
  }
  // Values outside [1, 2] are refused where users set them (the binding:
  // tests/native/test_index.py) and where files bring them (load checks).
}

// Updates move vectors; the old neighbourhoods are repaired, so recall after
// many parallel updates (2 threads, as under the sanitizers in CI) stays high.
TEST(Hnsw, ParallelUpdatesKeepRecall) {
  const size_t n = 1200, nq = 30, dim = 16, k = 10;
  auto x = random_rows(n, dim, 3);
  const auto q = random_rows(nq, dim, 4);
  for (DType d : {DType::Float32, DType::Int8}) {
    Hnsw h(params(Space::L2, d, dim, n));
    h.add(x.data(), n, nullptr, nullptr, 2, false, false);
    const auto moved = random_rows(n / 2, dim, 5);
    std::vector<uint64_t> ids(n / 2);
    for (size_t i = 0; i < n / 2; ++i) {
      ids[i] = 2 * i;  // every other element moves to a new random position
      std::copy(moved.begin() + i * dim, moved.begin() + (i + 1) * dim, x.begin() + 2 * i * dim);
    }
    h.add(moved.data(), n / 2, ids.data(), nullptr, 2, true, false);
    EXPECT_EQ(h.count(), n);
    const auto truth = brute(x, n, q, nq, dim, k, Space::L2);
    std::vector<int64_t> out(nq * k);
    std::vector<float> sc(nq * k);
    const size_t ef = 100;
    h.search(q.data(), nq, k, &ef, 1, nullptr, nullptr, 1, out.data(), sc.data());
    EXPECT_GE(recall(out, truth, k), d == DType::Float32 ? 0.95 : 0.88) << dtype_name(d);
  }
}

TEST(Hnsw, LabelsRestrictResultsExactlyAndDeletedNeverReturned) {
  const size_t n = 800, dim = 16, k = 5;
  const auto x = random_rows(n, dim, 3);
  Hnsw h(params(Space::L2, DType::Int8, dim, n));
  std::vector<std::vector<uint32_t>> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = {uint32_t(i % 10), uint32_t(1000 + i % 3)};
  h.add(x.data(), n, nullptr, &labels, 2, false, false);
  for (uint32_t lab : {4u, 1001u}) {
    LabelQuery lq = LabelQuery::make({lab});
    std::vector<int64_t> ids(k);
    std::vector<float> sc(k);
    h.search(x.data(), 1, k, nullptr, 0, &lq, nullptr, 1, ids.data(), sc.data());
    for (int64_t id : ids) {
      ASSERT_GE(id, 0);
      EXPECT_TRUE(lab < 1000 ? id % 10 == lab : id % 3 == lab - 1000) << id;
    }
  }
  // Exact fallback and graph path agree with brute force on the allowed subset.
  for (double factor : {0.0, 1e9}) {
    h.set_filter_exact_factor(factor);
    LabelQuery lq = LabelQuery::make({7});
    std::vector<int64_t> ids(k);
    std::vector<float> sc(k);
    const size_t ef = 200;
    h.search(x.data() + 7 * dim, 1, k, &ef, 1, &lq, nullptr, 1, ids.data(), sc.data());
    EXPECT_EQ(ids[0], 7);
  }
  h.mark_deleted(7);
  EXPECT_THROW(h.mark_deleted(7), std::runtime_error);
  std::vector<int64_t> ids(k);
  std::vector<float> sc(k);
  h.search(x.data() + 7 * dim, 1, k, nullptr, 0, nullptr, nullptr, 1, ids.data(), sc.data());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 7), 0);
  h.unmark_deleted(7);
  h.search(x.data() + 7 * dim, 1, k, nullptr, 0, nullptr, nullptr, 1, ids.data(), sc.data());
  EXPECT_EQ(ids[0], 7);
}

// Unfiltered searches run over one sorted pool (search_pool.h's SearchPool),
// screened ones (a predicate, a row filter of a large share) over a
// ScreenedPool; with a filter that allows everything all must expand the same
// elements and return the same rows, scores included.
TEST(Hnsw, PoolSearchMatchesTheHeapSearchWhenEverythingIsAllowed) {
  const size_t n = 1500, dim = 24, nq = 40;
  for (Space space : {Space::L2, Space::IP}) {
    for (DType dtype : {DType::Int8, DType::Float32}) {
      const auto x = random_rows(n, dim, 11);
      const auto q = random_rows(nq, dim, 12);
      Hnsw h(params(space, dtype, dim, n));
      h.add(x.data(), n, nullptr, nullptr, 1, false, false);
      const IdPredicate all = [](uint32_t) { return true; };
      const std::vector<uint64_t> every_id((n + 63) / 64, ~uint64_t(0));
      const AllowedRows every_row = AllowedRows::from_external(h.store(), every_id.data(), every_id.size());
      for (size_t ef : {10u, 37u, 150u}) {
        for (size_t i = 0; i < nq; ++i) {
          const auto pool = h.search_internal(q.data() + i * dim, 10, ef, nullptr, nullptr);
          const auto heaps = h.search_internal(q.data() + i * dim, 10, ef, nullptr, &all);
          ASSERT_EQ(pool, heaps) << "space " << int(space) << " dtype " << int(dtype) << " ef " << ef << " q " << i;
          const auto by_rows = h.search_internal(q.data() + i * dim, 10, ef, nullptr, nullptr, &every_row);
          ASSERT_EQ(pool, by_rows) << "space " << int(space) << " dtype " << int(dtype) << " ef " << ef << " q " << i;
        }
      }
    }
  }
}

// The default entry beam is ef / 8 per query: the same results as that width set explicitly.
TEST(Hnsw, AutoEntryBeamIsEfOverEight) {
  const size_t n = 3000, dim = 16, nq = 30;
  const auto x = random_rows(n, dim, 21);
  const auto q = random_rows(nq, dim, 22);
  Hnsw h(params(Space::L2, DType::Int8, dim, n));
  h.add(x.data(), n, nullptr, nullptr, 1, false, false);
  EXPECT_EQ(h.entry_beam(), Hnsw::kAutoEntryBeam);
  EXPECT_EQ(h.entry_beam_for(7), 1u);
  EXPECT_EQ(h.entry_beam_for(16), 2u);
  EXPECT_EQ(h.entry_beam_for(128), 16u);
  for (size_t ef : {12u, 64u, 200u}) {
    std::vector<std::vector<Candidate>> autos;
    h.set_entry_beam(Hnsw::kAutoEntryBeam);
    for (size_t i = 0; i < nq; ++i) autos.push_back(h.search_internal(q.data() + i * dim, 10, ef, nullptr, nullptr));
    h.set_entry_beam(std::max<size_t>(1, ef / 8));
    for (size_t i = 0; i < nq; ++i)
      ASSERT_EQ(h.search_internal(q.data() + i * dim, 10, ef, nullptr, nullptr), autos[i]) << "ef " << ef;
  }
  h.set_entry_beam(1);
  EXPECT_EQ(h.entry_beam_for(128), 1u);
  h.set_entry_beam(32);
  EXPECT_EQ(h.entry_beam_for(8), 32u);
}

TEST(Hnsw, CapacityDuplicatesAndPadding) {
  const size_t dim = 8;
  const auto x = random_rows(20, dim, 4);
  Hnsw h(params(Space::IP, DType::Float32, dim, 10));
  EXPECT_THROW(h.add(x.data(), 20, nullptr, nullptr, 1, false, false), std::runtime_error);
  EXPECT_EQ(h.count(), 0u);
  h.add(x.data(), 3, nullptr, nullptr, 1, false, false);
  const uint64_t dup = 1;
  EXPECT_THROW(h.add(x.data(), 1, &dup, nullptr, 1, false, false), std::invalid_argument);
  std::vector<int64_t> ids(5);
  std::vector<float> sc(5);
  h.search(x.data(), 1, 5, nullptr, 0, nullptr, nullptr, 1, ids.data(), sc.data());
  EXPECT_EQ(ids[3], -1);
  EXPECT_EQ(ids[4], -1);
}

TEST(Hnsw, SaveLoadRoundTripAndMmap) {
  const size_t n = 600, dim = 16, k = 8;
  const auto x = random_rows(n, dim, 5);
  HnswParams p = params(Space::Cosine, DType::Int8, dim, n);
  p.keep_float = true;
  Hnsw h(p);
  std::vector<std::vector<uint32_t>> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = {uint32_t(i % 5), uint32_t(70 + i % 2)};
  h.add(x.data(), n, nullptr, &labels, 2, false, false);
  h.mark_deleted(3);
  const std::string path = temp_path("roundtrip.idx");
  h.save(path);
  std::vector<int64_t> a(10 * k), b(10 * k);
  std::vector<float> sa(10 * k), sb(10 * k);
  LabelQuery lq = LabelQuery::make({71});
  h.search(x.data(), 10, k, nullptr, 0, &lq, nullptr, 1, a.data(), sa.data());
  for (bool mmap : {false, true}) {
    auto g = Hnsw::load(path, mmap);
    EXPECT_EQ(g->count(), n);
    EXPECT_EQ(g->deleted_count(), 1u);
    EXPECT_EQ(g->read_only(), mmap);
    g->search(x.data(), 10, k, nullptr, 0, &lq, nullptr, 1, b.data(), sb.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(sa, sb);
    if (mmap) {
      EXPECT_THROW(g->add(x.data(), 1, nullptr, nullptr, 1, false, false), std::runtime_error);
    }
  }
  std::remove(path.c_str());
}

// Level-0 ids are packed as wide as the capacity needs (vector_store.h):
// ids up to the top of the width round-trip, and widening them (a resize past
// a power of two) moves every slab without changing a link, flag or code.
TEST(VectorStore, PackedLinkListsSurviveWideningTheIds) {
  const size_t dim = 16, slots = 32, n = 40;
  VectorStore s(Space::IP, DType::Int8, dim, slots, false);
  s.reserve(70000);
  ASSERT_EQ(s.link_bits(), 17u);
  std::vector<uint64_t> ext(n);
  for (size_t i = 0; i < n; ++i) ext[i] = 1000 + i;
  s.allocate(ext.data(), n);
  const auto x = random_rows(n, dim, 9);
  s.train(x.data(), n);
  std::mt19937 rng(3);
  std::vector<std::vector<uint32_t>> lists(n);
  for (size_t i = 0; i < n; ++i) {
    s.encode(uint32_t(i), x.data() + i * dim);
    lists[i].resize(i % (slots + 1));  // 0..32 links
    for (uint32_t& id : lists[i]) id = rng() % 70000;
    if (!lists[i].empty()) lists[i][0] = 69999;  // the top of the capacity
    s.write_links0(uint32_t(i), lists[i].data(), uint32_t(lists[i].size()));
    s.set_signature(uint32_t(i), uint64_t(i) * 0x9E3779B97F4A7C15ull, i % 2 == 0);
  }
  s.set_deleted(7, true);
  auto snapshot = [&] {
    std::vector<std::vector<uint32_t>> links(n);
    std::vector<std::vector<float>> vecs(n, std::vector<float>(dim));
    std::vector<uint32_t> headers(n);
    std::vector<uint64_t> sigs(n);
    for (size_t i = 0; i < n; ++i) {
      links[i].resize(slots);
      links[i].resize(s.read_links0(uint32_t(i), links[i].data()));
      s.decode(uint32_t(i), vecs[i].data());
      headers[i] = s.header(uint32_t(i));
      sigs[i] = s.signature(uint32_t(i));
    }
    return std::make_tuple(links, vecs, headers, sigs);
  };
  const auto before = snapshot();
  EXPECT_EQ(std::get<0>(before), lists);
  s.reserve(300000);  // 19 bits: the signature moves from byte 72 to 80
  EXPECT_EQ(s.link_bits(), 19u);
  EXPECT_EQ(snapshot(), before);
  EXPECT_TRUE(s.is_deleted(7));
  s.reserve(n);  // shrinking keeps the width (ids never narrow)
  EXPECT_EQ(s.link_bits(), 19u);
  EXPECT_EQ(snapshot(), before);
}

TEST(Hnsw, ResizingPastAnIdWidthKeepsTheGraphAndItsFile) {
  const size_t n = 400, dim = 12, k = 6, nq = 12;
  const auto x = random_rows(n + 100, dim, 11), q = random_rows(nq, dim, 12);
  Hnsw h(params(Space::L2, DType::Int8, dim, n));
  h.add(x.data(), n, nullptr, nullptr, 2, false, false);
  auto search = [&](const Hnsw& g) {
    std::vector<int64_t> ids(nq * k);
    std::vector<float> sc(nq * k);
    g.search(q.data(), nq, k, nullptr, 0, nullptr, nullptr, 1, ids.data(), sc.data());
    return std::make_pair(ids, sc);
  };
  const auto before = search(h);
  h.resize(70000);  // 16 -> 17-bit ids: every slab rewritten
  EXPECT_EQ(search(h), before);
  h.add(x.data() + n * dim, 100, nullptr, nullptr, 2, false, false);
  const auto grown = search(h);
  const std::string path = temp_path("wide.idx");
  h.save(path);
  for (bool mmap : {false, true}) {
    auto g = Hnsw::load(path, mmap);
    EXPECT_EQ(g->count(), n + 100);
    EXPECT_EQ(search(*g), grown);
  }
  std::remove(path.c_str());
}

TEST(FileFormat, RejectsTruncatedCorruptForeignAndNewerFiles) {
  const size_t n = 200, dim = 8;
  const auto x = random_rows(n, dim, 6);
  Hnsw h(params(Space::L2, DType::Int8, dim, n));
  h.add(x.data(), n, nullptr, nullptr, 1, false, false);
  const std::vector<char> good = h.to_bytes();
  ASSERT_NO_THROW(Hnsw::from_bytes(good.data(), good.size()));
  // Truncations at many points, including inside the header.
  for (size_t cut : {size_t(0), size_t(4), size_t(30), good.size() / 2, good.size() - 1})
    EXPECT_THROW(Hnsw::from_bytes(good.data(), cut), std::invalid_argument) << cut;
  // A flipped byte anywhere fails the checksum (or an earlier check).
  for (size_t pos : {size_t(40), good.size() / 3, good.size() - 20}) {
    std::vector<char> bad = good;
    bad[pos] ^= 0x5a;
    EXPECT_THROW(Hnsw::from_bytes(bad.data(), bad.size()), std::invalid_argument) << pos;
  }
  std::vector<char> foreign = good;
  foreign[0] = 'X';
  EXPECT_THROW(Hnsw::from_bytes(foreign.data(), foreign.size()), std::invalid_argument);
  std::vector<char> newer = good;
  newer[8] = 99;  // version field
  try {
    Hnsw::from_bytes(newer.data(), newer.size());
    FAIL() << "newer version accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos);
  }
  EXPECT_THROW(FlatIndex::from_bytes(good.data(), good.size()), std::invalid_argument);  // wrong kind
  EXPECT_THROW(Hnsw::load("/nonexistent/medretrieve.idx", false), std::runtime_error);
}

TEST(Flat, ExactMatchesBruteForceWithLabelsAndDeletions) {
  const size_t n = 500, nq = 12, dim = 20, k = 7;
  const auto x = random_rows(n, dim, 7), q = random_rows(nq, dim, 8);
  const auto truth = brute(x, n, q, nq, dim, k, Space::IP);
  FlatIndex f(Space::IP, DType::Float32, dim);
  std::vector<std::vector<uint32_t>> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = {uint32_t(i % 4)};
  f.add(x.data(), n, nullptr, &labels, 2);
  std::vector<int64_t> ids(nq * k);
  std::vector<float> sc(nq * k);
  f.search(q.data(), nq, k, nullptr, nullptr, 2, ids.data(), sc.data());
  EXPECT_DOUBLE_EQ(recall(ids, truth, k), 1.0);
  LabelQuery lq = LabelQuery::make({2});
  f.search(q.data(), nq, k, &lq, nullptr, 1, ids.data(), sc.data());
  for (int64_t id : ids) EXPECT_EQ(id % 4, 2);
  f.mark_deleted(uint64_t(truth[0][0]));
  f.search(q.data(), 1, k, nullptr, nullptr, 1, ids.data(), sc.data());
  EXPECT_NE(ids[0], truth[0][0]);
  const std::vector<char> bytes = f.to_bytes();
  auto g = FlatIndex::from_bytes(bytes.data(), bytes.size());
  EXPECT_EQ(g->size(), n - 1);
}

// hnswlib's BFIndex semantics (FlatAddMode): updates revive deleted ids in
// place, new ids reuse deleted slots, the live limit is checked before any change.
TEST(Flat, AddModeUpdatesReusesSlotsAndKeepsTheLimit) {
  const size_t dim = 8;
  const auto x = random_rows(6, dim, 21);
  FlatIndex f(Space::L2, DType::Float32, dim);
  FlatAddMode bf;
  bf.update = bf.reuse_deleted = true;
  bf.max_live = 4;
  const uint64_t first[] = {10, 11, 12, 13};
  std::vector<std::vector<uint32_t>> labels(4, std::vector<uint32_t>{7});
  f.add(x.data(), 4, first, &labels, 1, bf);
  const uint64_t one_more[] = {14};
  EXPECT_THROW(f.add(x.data() + 4 * dim, 1, one_more, nullptr, 1, bf), std::runtime_error);
  EXPECT_EQ(f.count(), 4u);  // nothing changed
  EXPECT_THROW(f.add(x.data(), 1, first, nullptr, 1), std::invalid_argument);  // the native default refuses updates
  f.mark_deleted(11);
  f.mark_deleted(12);
  const uint64_t mixed[] = {12, 20};  // 12 revived in place, 20 takes 11's slot
  f.add(x.data() + 4 * dim, 2, mixed, nullptr, 1, bf);
  EXPECT_EQ(f.count(), 4u);
  EXPECT_EQ(f.size(), 4u);
  EXPECT_FALSE(f.contains(11));
  EXPECT_FALSE(f.is_deleted_ext(12));
  std::vector<float> got(dim);
  const uint64_t twenty = 20;
  f.get_items(&twenty, 1, got.data());
  EXPECT_EQ(got, std::vector<float>(x.begin() + 5 * dim, x.begin() + 6 * dim));
  LabelQuery lq = LabelQuery::make({7});
  std::vector<int64_t> ids(4);
  std::vector<float> sc(4);
  f.search(x.data(), 1, 4, &lq, nullptr, 1, ids.data(), sc.data());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), -1), 1);  // 20 did not inherit 11's label; 12 kept its own
  f.set_declared_max(4);
  const std::vector<char> bytes = f.to_bytes();
  EXPECT_EQ(FlatIndex::from_bytes(bytes.data(), bytes.size())->declared_max(), 4u);
}

// The predicate runs only for elements that would enter the top k, and the
// result is the exact filtered top k.
TEST(Flat, PredicateRunsOnlyForCandidatesOfTheTopK) {
  const size_t n = 2000, dim = 16, k = 5;
  const auto x = random_rows(n, dim, 23), q = random_rows(1, dim, 24);
  FlatIndex f(Space::L2, DType::Float32, dim);
  f.add(x.data(), n, nullptr, nullptr, 1);
  std::atomic<size_t> calls{0};
  const IdPredicate odd = [&calls, &f](uint32_t id) {
    ++calls;
    return f.store().ext_id(id) % 2 == 1;
  };
  std::vector<int64_t> ids(k);
  std::vector<float> sc(k);
  f.search(q.data(), 1, k, nullptr, &odd, 1, ids.data(), sc.data());
  EXPECT_LT(calls.load(), n / 4);  // ~290 here: k log(n / k) for each of the 8 interleaved clusters
  std::vector<std::pair<float, int64_t>> all;
  for (size_t i = 1; i < n; i += 2) {
    float d = 0;
    for (size_t j = 0; j < dim; ++j) d += (x[i * dim + j] - q[j]) * (x[i * dim + j] - q[j]);
    all.emplace_back(d, int64_t(i));
  }
  std::sort(all.begin(), all.end());
  for (size_t j = 0; j < k; ++j) EXPECT_EQ(ids[j], all[j].second);
}

// pack_live / pack_queries feed the CUDA table: the accelerator's formula
// (float64 here) plus the per-query offset must give the CPU search's scores.
TEST(Flat, PackedRowsAndQueriesReproduceTheCpuScores) {
  const size_t n = 300, nq = 5, dim = 29, k = 300;
  const auto x = random_rows(n, dim, 11), q = random_rows(nq, dim, 12);
  for (Space space : {Space::IP, Space::L2, Space::Cosine}) {
    for (DType dtype : {DType::Int8, DType::Float32}) {
      FlatIndex f(space, dtype, dim);
      f.add(x.data(), n, nullptr, nullptr, 1);
      f.mark_deleted(3);
      const PackedRows rows = f.pack_live();
      const PackedQueries pq = f.pack_queries(q.data(), nq);
      ASSERT_EQ(rows.ids.size(), n - 1);
      EXPECT_EQ(rows.ids[3], 4u);  // the deleted row is skipped, order kept
      std::vector<int64_t> ids(nq * k);
      std::vector<float> sc(nq * k);
      f.search(q.data(), nq, k, nullptr, nullptr, 1, ids.data(), sc.data());
      for (size_t i = 0; i < nq; ++i) {
        for (size_t j = 0; j < n - 1; ++j) {
          double s = 0;
          if (dtype == DType::Int8) {
            double dot = 0, qn = 0, xn = 0;
            for (size_t d = 0; d < dim; ++d) {
              const double a = pq.codes[i * dim + d], b = rows.codes[j * dim + d];
              dot += a * b;
              qn += a * a;
              xn += b * b;
            }
            const double sq = pq.scales[i], sx = rows.scales[j];
            s = space == Space::L2 ? 2 * sq * sx * dot - sq * sq * qn - sx * sx * xn : sq * sx * dot;
          } else {
            for (size_t d = 0; d < dim; ++d) {
              const double a = pq.rows[i * dim + d], b = rows.rows[j * dim + d];
              s += space == Space::L2 ? -(a - b) * (a - b) : a * b;
            }
          }
          s += pq.offsets[i];
          const int64_t ext = int64_t(rows.ids[j]);
          const size_t at = size_t(std::find(ids.begin() + i * k, ids.begin() + (i + 1) * k, ext) - ids.begin());
          ASSERT_LT(at, (i + 1) * k);
          EXPECT_NEAR(s, sc[at], 1e-4 * std::max(1.0, std::fabs(s))) << "space " << int(space) << " row " << j;
        }
      }
    }
  }
}

TEST(Hnsw, SearchWhileAddingReturnsFullValidRows) {
  const size_t n = 3000, dim = 16, k = 5;
  const auto x = random_rows(n, dim, 9);
  Hnsw h(params(Space::L2, DType::Int8, dim, n));
  h.add(x.data(), 300, nullptr, nullptr, 1, false, false);
  std::atomic<bool> done{false};
  std::atomic<size_t> bad{0}, searches{0};
  std::thread reader([&] {
    std::vector<int64_t> ids(k);
    std::vector<float> sc(k);
    while (!done.load()) {
      h.search(x.data() + 17 * dim, 1, k, nullptr, 0, nullptr, nullptr, 1, ids.data(), sc.data());
      for (int64_t id : ids) bad += (id < 0 || id >= int64_t(n));
      ++searches;
    }
  });
  for (size_t s = 300; s < n; s += 300) {
    std::vector<uint64_t> ids(300);
    for (size_t i = 0; i < 300; ++i) ids[i] = s + i;
    h.add(x.data() + s * dim, 300, ids.data(), nullptr, 2, false, false);
  }
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(searches.load(), 0u);
  EXPECT_EQ(h.count(), n);
}
