// The selection of the GPU's fused exact search (cuda/tile_select.h) through
// its CPU twin (cuda/tiled_topk_twin.h), against a float64 reference on
// awkward sizes: k above a tile's rows and above n, n not a multiple of the
// tile, one or many slices, all-equal scores, int8 extremes, non-finite
// scores, filtered rows (none or fewer than k allowed). Order contract:
// score descending, then row ascending; id -1 / score -inf past the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cuda/tile_select.h"
#include "cuda/tiled_topk_twin.h"

using namespace medretrieve::cuda;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Result {
  std::vector<int64_t> ids;
  std::vector<float> scores;
};

// float64 scores -> the top k of each query (score desc, row asc), allowed and
// finite-or-+inf rows only, padded with -1 / -inf.
Result reference(const std::vector<double>& s, size_t nq, size_t n, size_t k, const std::vector<uint64_t>* allowed) {
  Result r{std::vector<int64_t>(nq * k, -1), std::vector<float>(nq * k, -kInf)};
  for (size_t q = 0; q < nq; ++q) {
    std::vector<size_t> rows;
    for (size_t i = 0; i < n; ++i) {
      const double v = s[q * n + i];
      const bool ok = !allowed || (i / 64 < allowed->size() && ((*allowed)[i / 64] >> (i % 64) & 1));
      if (ok && !std::isnan(v) && v != -HUGE_VAL) rows.push_back(i);
    }
    std::stable_sort(rows.begin(), rows.end(), [&](size_t a, size_t b) { return s[q * n + a] > s[q * n + b]; });
    for (size_t j = 0; j < std::min(k, rows.size()); ++j) {
      r.ids[q * k + j] = int64_t(rows[j]);
      r.scores[q * k + j] = float(s[q * n + rows[j]]);
    }
  }
  return r;
}

void expect_same(const Result& got, const Result& want, const char* what) {
  ASSERT_EQ(got.ids.size(), want.ids.size());
  for (size_t i = 0; i < got.ids.size(); ++i) {
    ASSERT_EQ(got.ids[i], want.ids[i]) << what << " position " << i;
    ASSERT_EQ(got.scores[i], want.scores[i]) << what << " position " << i;
  }
}

// Integer-valued data small enough that float32 sums are exact: the twin must
// equal the float64 reference bit for bit.
struct IntData {
  size_t nq, n, dim;
  std::vector<float> q, x;
  std::vector<int8_t> qi, xi;
  std::vector<float> qs, xs;  // powers of two: scaled sums stay exact
};

IntData draw(size_t nq, size_t n, size_t dim, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> v(lo, hi), e(-1, 1);
  IntData d{nq, n, dim, {}, {}, {}, {}, {}, {}};
  for (size_t i = 0; i < nq * dim; ++i) d.qi.push_back(int8_t(v(rng)));
  for (size_t i = 0; i < n * dim; ++i) d.xi.push_back(int8_t(v(rng)));
  d.q.assign(d.qi.begin(), d.qi.end());
  d.x.assign(d.xi.begin(), d.xi.end());
  for (size_t i = 0; i < nq; ++i) d.qs.push_back(std::ldexp(1.f, e(rng)));
  for (size_t i = 0; i < n; ++i) d.xs.push_back(std::ldexp(1.f, e(rng)));
  return d;
}

std::vector<double> scores64(const IntData& d, bool l2, bool scaled) {
  std::vector<double> s(d.nq * d.n);
  for (size_t q = 0; q < d.nq; ++q)
    for (size_t i = 0; i < d.n; ++i) {
      const double a = scaled ? d.qs[q] : 1.0, b = scaled ? d.xs[i] : 1.0;
      double acc = 0;
      for (size_t j = 0; j < d.dim; ++j) {
        const double u = a * d.qi[q * d.dim + j], w = b * d.xi[i * d.dim + j];
        acc += l2 ? (u - w) * (u - w) : u * w;
      }
      s[q * d.n + i] = l2 ? -acc : acc;
    }
  return s;
}

Result run_f32(const IntData& d, size_t k, bool l2, twin::TileShape shape, const std::vector<uint64_t>* allowed) {
  Result r{std::vector<int64_t>(d.nq * k), std::vector<float>(d.nq * k)};
  twin::tiled_topk_f32(d.q.data(), d.nq, d.x.data(), d.n, d.dim, k, l2, shape, allowed ? allowed->data() : nullptr,
                       allowed ? allowed->size() : 0, r.ids.data(), r.scores.data());
  return r;
}

Result run_i8(const IntData& d, size_t k, bool l2, twin::TileShape shape, const std::vector<uint64_t>* allowed,
              bool scaled) {
  Result r{std::vector<int64_t>(d.nq * k), std::vector<float>(d.nq * k)};
  twin::tiled_topk_i8(d.qi.data(), scaled ? d.qs.data() : nullptr, d.nq, d.xi.data(), scaled ? d.xs.data() : nullptr,
                      d.n, d.dim, k, l2, shape, allowed ? allowed->data() : nullptr, allowed ? allowed->size() : 0,
                      r.ids.data(), r.scores.data());
  return r;
}

}  // namespace

TEST(TileSelect, PackOrdersByScoreThenRow) {
  using namespace tile_select;
  EXPECT_GT(pack(2.f, 9), pack(1.f, 0));
  EXPECT_GT(pack(1.f, 3), pack(1.f, 4));        // tie: the smaller row is better
  EXPECT_GT(pack(-0.f, 1), pack(0.f, 2));       // -0 ties with +0
  EXPECT_GT(pack(kInf, 5), pack(3e38f, 0));
  EXPECT_GT(pack(-3e38f, 0), 0ull);             // the lowest finite score still beats an empty queue's bound
  for (float f : {0.f, -0.f, 1.5f, -1.5f, kInf, 3e38f, -3e38f, 1e-45f, -1e-45f}) {
    EXPECT_EQ(packed_score(pack(f, 7)), f == 0.f ? 0.f : f);
    EXPECT_EQ(packed_row(pack(f, 7)), 7u);
  }
  EXPECT_FALSE(selectable(std::nanf("")));
  EXPECT_FALSE(selectable(-kInf));
  EXPECT_TRUE(selectable(kInf));
  EXPECT_TRUE(selectable(-3.4028234e38f));
}

TEST(TileSelect, RankSortAndMergeInPartsKeepTheBestK) {
  using namespace tile_select;
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int k = 1 + int(rng() % 40), na = int(rng() % (k + 1)), nb = int(rng() % 30);
    const int parts = 1 + int(rng() % 9);
    std::vector<Packed> a(static_cast<size_t>(na)), b(static_cast<size_t>(nb)), all;
    for (int i = 0; i < na; ++i) a[size_t(i)] = pack(float(rng() % 20), uint32_t(i));  // few scores: ties
    for (int i = 0; i < nb; ++i) b[size_t(i)] = pack(float(rng() % 20), uint32_t(100 + i));
    std::sort(a.begin(), a.end(), std::greater<Packed>());
    all = a;
    all.insert(all.end(), b.begin(), b.end());
    std::sort(all.begin(), all.end(), std::greater<Packed>());
    std::vector<Packed> sorted(b.size() + 1, 0), out(static_cast<size_t>(k) + 1, 0);
    for (int p = parts - 1; p >= 0; --p) rank_sort_part(b.data(), nb, sorted.data(), p, parts);  // any part order
    ASSERT_TRUE(std::is_sorted(sorted.begin(), sorted.begin() + nb, std::greater<Packed>()));
    for (int p = 0; p < parts; ++p) merge_part(a.data(), na, sorted.data(), nb, k, p, parts, out.data());
    const int size = merged_size(na, nb, k);
    ASSERT_EQ(size, std::min(k, na + nb));
    for (int i = 0; i < size; ++i) ASSERT_EQ(out[size_t(i)], all[size_t(i)]) << "trial " << trial << " at " << i;
    ASSERT_EQ(out[size_t(size)], 0ull) << "wrote past the merged size";
  }
}

TEST(TiledTopk, MatchesFloat64ReferenceOnAwkwardSizes) {
  // (n, k): k above the tile's rows, above n, n = 0 and 1, n off the tile.
  const size_t sizes[][2] = {{0, 3}, {1, 1}, {1, 5}, {5, 5}, {63, 10}, {64, 64}, {65, 100}, {130, 129}, {1001, 10},
                             {1001, 300}, {1001, 1024}, {300, 1024}};
  const size_t tiles[] = {1, 7, 64, 128};
  const size_t slice_counts[] = {1, 3, 16};
  const int part_counts[][2] = {{1, 1}, {8, 32}, {3, 5}};
  uint32_t seed = 1;
  for (const auto& nk : sizes)
    for (size_t tile : tiles)
      for (size_t slices : slice_counts) {
        const size_t n = nk[0], k = nk[1];
        // codes in [-2, 2] over 3 dims: scores take a few values, ties everywhere
        const IntData d = draw(4, n, 3, -2, 2, seed++);
        const int* parts = part_counts[seed % 3];
        for (bool l2 : {false, true}) {
          const twin::TileShape shape{tile, slices, parts[0], parts[1]};
          const Result want = reference(scores64(d, l2, false), d.nq, n, k, nullptr);
          expect_same(run_f32(d, k, l2, shape, nullptr), want, "float32");
          expect_same(run_i8(d, k, l2, shape, nullptr, false), want, "int8");
          expect_same(run_i8(d, k, l2, shape, nullptr, true),
                      reference(scores64(d, l2, true), d.nq, n, k, nullptr), "int8 scaled");
        }
      }
}

TEST(TiledTopk, AllEqualScoresGiveTheSmallestRows) {
  IntData d = draw(3, 1000, 8, 1, 1, 5);  // every code 1: every score equal
  for (size_t k : {1, 10, 200, 1024}) {
    const Result r = run_i8(d, k, false, {64, 5, 8, 32}, nullptr, false);
    for (size_t q = 0; q < d.nq; ++q)
      for (size_t j = 0; j < k; ++j) {
        ASSERT_EQ(r.ids[q * k + j], j < d.n ? int64_t(j) : -1);
        ASSERT_EQ(r.scores[q * k + j], j < d.n ? 8.f : -kInf);
      }
  }
}

TEST(TiledTopk, Int8ExtremesAreExact) {
  // -128 and 127 only, 256 dims: |dot| and the norms stay below 2^24 (exact in float).
  IntData d = draw(5, 777, 256, -128, 127, 9);
  std::mt19937 rng(9);
  for (auto* v : {&d.qi, &d.xi})
    for (auto& c : *v) c = (rng() & 1) ? int8_t(-128) : int8_t(127);
  d.q.assign(d.qi.begin(), d.qi.end());
  d.x.assign(d.xi.begin(), d.xi.end());
  for (bool l2 : {false, true})
    for (size_t k : {1, 50, 1024}) {
      const Result want = reference(scores64(d, l2, false), d.nq, d.n, k, nullptr);
      expect_same(run_i8(d, k, l2, {128, 6, 8, 32}, nullptr, false), want, "int8 extremes");
      expect_same(run_f32(d, k, l2, {64, 6, 4, 32}, nullptr), want, "float32 extremes");
    }
}

TEST(TiledTopk, RowFilterNoneFewOrMany) {
  const IntData d = draw(3, 500, 4, -3, 3, 11);
  std::mt19937 rng(11);
  std::vector<uint64_t> none(8, 0), few(8, 0), many(8, 0), short_words(2, ~0ull);
  for (size_t i : {3, 77, 499}) few[i / 64] |= 1ull << (i % 64);
  for (size_t i = 0; i < 500; ++i)
    if (rng() % 3) many[i / 64] |= 1ull << (i % 64);
  for (const auto* filter : {&none, &few, &many, &short_words})  // short_words: rows past 128 are not allowed
    for (size_t k : {1, 5, 100, 1024})
      for (bool l2 : {false, true}) {
        const Result want = reference(scores64(d, l2, false), d.nq, d.n, k, filter);
        expect_same(run_i8(d, k, l2, {128, 2, 8, 32}, filter, false), want, "filtered int8");
        expect_same(run_f32(d, k, l2, {7, 3, 4, 2}, filter), want, "filtered float32");
      }
}

TEST(TiledTopk, NonFiniteScores) {
  // +inf is selectable (ties by row), NaN and -inf never are, -0 ties with +0.
  const std::vector<float> s = {1.f, kInf, std::nanf(""), -kInf, -0.f, 0.f, kInf, -3e38f, 2.f, std::nanf("")};
  const std::vector<int64_t> want_ids = {1, 6, 8, 0, 4, 5, 7, -1, -1, -1, -1};
  for (size_t tile : {1, 3, 64})
    for (size_t slices : {1, 2, 4}) {
      std::vector<int64_t> ids(want_ids.size());
      std::vector<float> scores(want_ids.size());
      auto score = [&](size_t, size_t row) { return s[row]; };
      twin::tiled_topk(1, s.size(), ids.size(), {tile, slices, 2, 3}, nullptr, 0, score, ids.data(), scores.data());
      EXPECT_EQ(ids, want_ids);
      EXPECT_EQ(scores[0], kInf);
      EXPECT_EQ(scores[4], 0.f);
      EXPECT_EQ(scores[7], -kInf);
    }
}

TEST(TiledTopk, RandomFloatsSelectExactlyWhatTheirScoresRank) {
  // Non-integer data: the twin's float32 scores differ from float64 in the
  // last bits, so the selection is checked against its own scores ranked in
  // full, and the scores against float64 within float rounding.
  std::mt19937 rng(21);
  std::normal_distribution<float> g;
  const size_t nq = 6, n = 2049, dim = 33;
  std::vector<float> q(nq * dim), x(n * dim);
  for (float& v : q) v = g(rng);
  for (float& v : x) v = g(rng);
  for (bool l2 : {false, true})
    for (size_t k : {1, 10, 129, 1024}) {
      Result got{std::vector<int64_t>(nq * k), std::vector<float>(nq * k)};
      twin::tiled_topk_f32(q.data(), nq, x.data(), n, dim, k, l2, {64, 5, 4, 32}, nullptr, 0, got.ids.data(),
                           got.scores.data());
      std::vector<double> own(nq * n), exact(nq * n);
      for (size_t a = 0; a < nq; ++a)
        for (size_t i = 0; i < n; ++i) {
          float acc = 0.f;
          double acc64 = 0;
          for (size_t j = 0; j < dim; ++j) {
            const float u = q[a * dim + j], w = x[i * dim + j];
            acc = l2 ? std::fma(u - w, u - w, acc) : std::fma(u, w, acc);
            acc64 += l2 ? (double(u) - w) * (double(u) - w) : double(u) * w;
          }
          own[a * n + i] = l2 ? -acc : acc;
          exact[a * n + i] = l2 ? -acc64 : acc64;
        }
      expect_same(got, reference(own, nq, n, k, nullptr), "own scores");
      for (size_t c = 0; c < nq * k; ++c)
        ASSERT_NEAR(got.scores[c], exact[(c / k) * n + size_t(got.ids[c])], 1e-4 * (l2 ? 2 * dim : std::sqrt(dim)));
    }
}

TEST(TiledTopk, RefusesBadShapes) {
  std::vector<int64_t> ids(1);
  std::vector<float> scores(1);
  auto score = [](size_t, size_t) { return 0.f; };
  EXPECT_THROW(twin::tiled_topk(1, 1, 0, {64, 1}, nullptr, 0, score, ids.data(), scores.data()), std::invalid_argument);
  EXPECT_THROW(twin::tiled_topk(1, 1, 1, {0, 1}, nullptr, 0, score, ids.data(), scores.data()), std::invalid_argument);
  EXPECT_THROW(twin::tiled_topk(1, 1, 1, {64, 0}, nullptr, 0, score, ids.data(), scores.data()), std::invalid_argument);
  EXPECT_THROW(twin::tiled_topk(1, 1, 1, {64, 1, 0, 1}, nullptr, 0, score, ids.data(), scores.data()),
               std::invalid_argument);
}
