// Fusion operators against straightforward references: MMR (float32 and
// int8 in the centred-code form), RRF and score fusion, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusion/mmr.h"
#include "fusion/row_kernels.h"
#include "fusion/rrf.h"
#include "kernels/distances.h"

using namespace medretrieve::fusion;

namespace {

// Full similarity matrix + greedy loop, ties: MMR, relevance, position.
MmrResult reference_mmr(const std::vector<std::vector<double>>& sim, const std::vector<float>& rel, size_t k,
                        float lambda) {
  const size_t n = rel.size();
  std::vector<double> max_sim(n, 0.0);
  std::vector<bool> taken(n, false);
  MmrResult out;
  for (size_t step = 0; step < std::min(k, n); ++step) {
    long best = -1;
    double best_val = 0;
    for (size_t i = 0; i < n; ++i) {
      if (taken[i]) continue;
      double v = double(lambda) * rel[i] - (1.0 - lambda) * max_sim[i];
      if (best < 0 || v > best_val || (v == best_val && rel[i] > rel[size_t(best)])) {
        best = long(i);
        best_val = v;
      }
    }
    taken[size_t(best)] = true;
    out.order.push_back(best);
    out.scores.push_back(float(best_val));
    for (size_t i = 0; i < n; ++i)
      if (!taken[i]) max_sim[i] = step == 0 ? sim[i][size_t(best)] : std::max(max_sim[i], sim[i][size_t(best)]);
  }
  return out;
}

void expect_same(const MmrResult& got, const MmrResult& want, double scale) {
  ASSERT_EQ(got.order, want.order);
  for (size_t i = 0; i < got.scores.size(); ++i)
    EXPECT_NEAR(got.scores[i], want.scores[i], 1e-4 * (std::fabs(want.scores[i]) + scale));
}

}  // namespace

TEST(Mmr, Float32MatchesReferenceForEverySimilarity) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t n : {1u, 2u, 9u, 64u}) {
    for (size_t dim : {1u, 3u, 17u, 128u}) {
      std::vector<std::vector<float>> x(n, std::vector<float>(dim));
      std::vector<const float*> rows;
      for (auto& r : x) {
        for (auto& v : r) v = nd(rng);
        rows.push_back(r.data());
      }
      std::vector<float> rel(n);
      for (auto& v : rel) v = nd(rng);
      for (Metric s : {Metric::IP, Metric::L2, Metric::Cosine}) {
        std::vector<std::vector<double>> sim(n, std::vector<double>(n));
        for (size_t i = 0; i < n; ++i)
          for (size_t j = 0; j < n; ++j) {
            double dot = 0, l2 = 0, ni = 0, nj = 0;
            for (size_t d = 0; d < dim; ++d) {
              dot += double(x[i][d]) * x[j][d];
              l2 += (double(x[i][d]) - x[j][d]) * (double(x[i][d]) - x[j][d]);
              ni += double(x[i][d]) * x[i][d];
              nj += double(x[j][d]) * x[j][d];
            }
            sim[i][j] = s == Metric::IP ? dot : s == Metric::L2 ? -l2 : dot / std::sqrt(ni * nj);
          }
        if (dim == 1 && s == Metric::Cosine) continue;  // all +-1: exact ties everywhere
        for (float lambda : {0.f, 0.5f, 1.f})
          for (size_t k : {size_t(1), size_t(5), n + 3}) {
            MmrResult got = mmr_select_f32(rows.data(), n, dim, rel.data(), k, lambda, s);
            expect_same(got, reference_mmr(sim, rel, k, lambda), double(dim));
          }
      }
    }
  }
}

TEST(Mmr, Int8CentredCodesMatchDequantizedInnerProductAndL2) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> ud(-127, 127);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t n = 40, dim = 33;
  std::vector<float> centre(dim);
  for (auto& v : centre) v = nd(rng);
  std::vector<std::vector<int8_t>> codes(n, std::vector<int8_t>(dim));
  std::vector<float> scale(n), rel(n);
  std::vector<const int8_t*> rows;
  std::vector<std::vector<double>> x(n, std::vector<double>(dim));  // c + s * code
  for (size_t i = 0; i < n; ++i) {
    scale[i] = 0.01f + 0.02f * float(i % 5);
    for (size_t d = 0; d < dim; ++d) {
      codes[i][d] = int8_t(ud(rng));
      x[i][d] = centre[d] + double(scale[i]) * codes[i][d];
    }
    rows.push_back(codes[i].data());
    rel[i] = nd(rng);
  }
  double cc = 0;
  for (float c : centre) cc += double(c) * c;
  std::vector<float> off_ip(n), off_l2(n);
  for (size_t i = 0; i < n; ++i) {
    double cr = 0, rr = 0;
    for (size_t d = 0; d < dim; ++d) {
      cr += centre[d] * double(scale[i]) * codes[i][d];
      rr += std::pow(double(scale[i]) * codes[i][d], 2);
    }
    off_ip[i] = float(cr);
    off_l2[i] = float(-rr);
  }
  std::vector<std::vector<double>> ip(n, std::vector<double>(n)), l2(n, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      double dot = 0, dd = 0;
      for (size_t d = 0; d < dim; ++d) {
        dot += x[i][d] * x[j][d];
        dd += (x[i][d] - x[j][d]) * (x[i][d] - x[j][d]);
      }
      ip[i][j] = dot;
      l2[i][j] = -dd;
    }
  for (float lambda : {0.f, 0.3f, 1.f}) {
    expect_same(mmr_select_i8(rows.data(), scale.data(), off_ip.data(), float(cc), 1.f, n, dim, rel.data(), 8, lambda),
                reference_mmr(ip, rel, 8, lambda), 1.0);
    expect_same(mmr_select_i8(rows.data(), scale.data(), off_l2.data(), 0.f, 2.f, n, dim, rel.data(), 8, lambda),
                reference_mmr(l2, rel, 8, lambda), 1.0);
  }
}

TEST(Mmr, TiesGoToRelevanceThenPosition) {
  std::vector<std::vector<float>> x = {{1, 0}, {1, 0}, {0, 1}, {0, 1}};
  std::vector<const float*> rows;
  for (auto& r : x) rows.push_back(r.data());
  std::vector<float> rel = {1, 1, 1, 1};
  MmrResult r = mmr_select_f32(rows.data(), 4, 2, rel.data(), 4, 0.5f, Metric::IP);
  EXPECT_EQ(r.order, (std::vector<int64_t>{0, 2, 1, 3}));
  std::vector<float> rel2 = {1, 1, 1, 2};
  r = mmr_select_f32(rows.data(), 4, 2, rel2.data(), 2, 0.f, Metric::IP);
  EXPECT_EQ(r.order, (std::vector<int64_t>{3, 0}));
}

// lambda's range and finite relevance are the callers' checks, once (the
// bindings: tests/native/test_fusion.py and test_search_mmr.py); the operator
// still refuses a similarity it computed to be non-finite.
TEST(Mmr, NonFiniteSimilarityThrows) {
  std::vector<float> row = {1, 2};
  std::vector<float> nan_row = {NAN, 1}, rel2 = {1, 0};
  const float* rows2[] = {row.data(), nan_row.data()};
  EXPECT_THROW(mmr_select_f32(rows2, 2, 2, rel2.data(), 2, 0.5f, Metric::IP), std::invalid_argument);
  EXPECT_TRUE(mmr_select_f32(nullptr, 0, 2, nullptr, 3, 0.5f, Metric::L2).order.empty());
}

TEST(Rrf, MatchesMapReferenceWithDuplicatesWeightsAndTopN) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    const size_t L = 1 + rng() % 5;
    std::vector<std::vector<int64_t>> lists(L);
    std::vector<IdList> views;
    std::vector<double> w(L);
    for (size_t l = 0; l < L; ++l) {
      lists[l].resize(rng() % 60);
      for (auto& id : lists[l]) id = int64_t(rng() % 50) - 10;
      views.push_back({lists[l].data(), lists[l].size()});
      w[l] = 0.25 * double(rng() % 8);
    }
    const double k = trial % 2 ? 60.0 : 0.0;
    const size_t top_n = trial % 3 ? 0 : 7;
    std::map<int64_t, double> score;
    std::map<int64_t, int64_t> best;
    for (size_t l = 0; l < L; ++l) {
      std::set<int64_t> seen;
      for (size_t p = 0; p < lists[l].size(); ++p) {
        int64_t id = lists[l][p];
        if (!seen.insert(id).second) continue;
        score[id] += w[l] / (k + double(p + 1));
        best[id] = best.count(id) ? std::min(best[id], int64_t(p + 1)) : int64_t(p + 1);
      }
    }
    std::vector<int64_t> want;
    for (auto& kv : score) want.push_back(kv.first);
    std::sort(want.begin(), want.end(), [&](int64_t a, int64_t b) {
      if (score[a] != score[b]) return score[a] > score[b];
      if (best[a] != best[b]) return best[a] < best[b];
      return a < b;
    });
    if (top_n && want.size() > top_n) want.resize(top_n);
    Fused got = rrf(views, k, w.data(), top_n);
    ASSERT_EQ(got.ids, want);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got.scores[i], float(score[want[i]]));
  }
}

TEST(Rrf, BadArgumentsThrow) {
  std::vector<int64_t> ids = {1, 2};
  std::vector<IdList> views = {{ids.data(), ids.size()}};
  // k and the weights are checked once, where users pass them (the binding:
  // tests/native/test_fusion.py); the operator refuses a malformed list.
  EXPECT_THROW(rrf({{nullptr, 3}}, 60.0, nullptr, 0), std::invalid_argument);
  EXPECT_TRUE(rrf({}, 60.0, nullptr, 0).ids.empty());
}

TEST(ScoreFusion, MinMaxAndZScoreRules) {
  std::vector<int64_t> a = {1, 2, 3}, b = {3, 4};
  std::vector<float> sa = {3, 2, 1}, sb = {10, 0};
  std::vector<ScoredList> lists = {{a.data(), sa.data(), 3}, {b.data(), sb.data(), 2}};
  Fused f = fuse_scores(lists, ScoreNorm::MinMax, nullptr, 0);
  EXPECT_EQ(f.ids, (std::vector<int64_t>{1, 3, 2, 4}));
  EXPECT_FLOAT_EQ(f.scores[2], 0.5f);
  double w[] = {1.0, 3.0};
  f = fuse_scores(lists, ScoreNorm::MinMax, w, 2);
  EXPECT_EQ(f.ids, (std::vector<int64_t>{3, 1}));
  EXPECT_FLOAT_EQ(f.scores[0], 3.f);
  // z-score: list a -> (1.2247, 0, -1.2247), list b -> (1, -1); missing -> list minimum.
  f = fuse_scores(lists, ScoreNorm::ZScore, nullptr, 0);
  ASSERT_EQ(f.ids.size(), 4u);
  std::map<int64_t, float> got;
  for (size_t i = 0; i < 4; ++i) got[f.ids[i]] = f.scores[i];
  const float z = std::sqrt(1.5f);
  EXPECT_NEAR(got[1], z - 1.f, 1e-5);
  EXPECT_NEAR(got[2], 0.f - 1.f, 1e-5);
  EXPECT_NEAR(got[3], -z + 1.f, 1e-5);
  EXPECT_NEAR(got[4], -z - 1.f, 1e-5);
  std::vector<float> bad = {1, NAN};
  std::vector<ScoredList> bad_lists = {{b.data(), bad.data(), 2}};
  EXPECT_THROW(fuse_scores(bad_lists, ScoreNorm::MinMax, nullptr, 0), std::invalid_argument);
}

// Every level this CPU runs (not only the active one), on awkward sizes: the
// AVX2 and AVX-512 loops' 8- / 16-lane tails and the blocks of 1-4 rows.
TEST(RowKernels, OneVectorAgainstManyRowsMatchesFloat64AtEveryLevel) {
  namespace rk = medretrieve::fusion::rows;
  namespace kn = medretrieve::kernels;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ud(-127, 127);
  for (int l = 0; l <= int(kn::cpu_level()); ++l) {
    const auto level = kn::SimdLevel(l);
    if (!kn::table_for(level)) continue;
    for (size_t dim : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 23u, 24u, 33u, 384u, 767u, 768u}) {
      for (size_t n : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u, 9u}) {
        std::vector<float> v(dim), scale(n);
        for (auto& x : v) x = nd(rng);
        std::vector<std::vector<float>> fr(n, std::vector<float>(dim));
        std::vector<std::vector<int8_t>> ir(n, std::vector<int8_t>(dim));
        std::vector<const float*> fp;
        std::vector<const int8_t*> ip;
        for (size_t i = 0; i < n; ++i) {
          for (auto& x : fr[i]) x = nd(rng);
          for (auto& x : ir[i]) x = int8_t(ud(rng));
          scale[i] = 0.01f * float(i + 1);
          fp.push_back(fr[i].data());
          ip.push_back(ir[i].data());
        }
        std::vector<float> dot(n), l2(n), dot8(n), l28(n);
        rk::dot_f32(v.data(), fp.data(), n, dim, dot.data(), level);
        rk::l2sq_f32(v.data(), fp.data(), n, dim, l2.data(), level);
        rk::dot_f32_i8(v.data(), ip.data(), n, dim, dot8.data(), level);
        rk::l2sq_f32_i8(v.data(), ip.data(), scale.data(), n, dim, l28.data(), level);
        for (size_t i = 0; i < n; ++i) {
          double d = 0, l = 0, d8 = 0, l8 = 0, mag = 1;
          for (size_t j = 0; j < dim; ++j) {
            d += double(v[j]) * fr[i][j];
            l += std::pow(double(v[j]) - fr[i][j], 2);
            d8 += double(v[j]) * ir[i][j];
            l8 += std::pow(double(v[j]) - double(scale[i]) * ir[i][j], 2);
            mag += std::fabs(double(v[j]) * fr[i][j]) + std::fabs(double(v[j]) * ir[i][j]);
          }
          const std::string at = std::string(kn::level_name(level)) + " dim " + std::to_string(dim) + " n " +
                                  std::to_string(n) + " row " + std::to_string(i);
          EXPECT_NEAR(dot[i], d, 1e-5 * mag) << at;
          EXPECT_NEAR(l2[i], l, 1e-5 * (l + 1)) << at;
          EXPECT_NEAR(dot8[i], d8, 1e-5 * mag) << at;
          EXPECT_NEAR(l28[i], l8, 1e-5 * (l8 + 1)) << at;
        }
        // A row's value does not depend on the block it falls in (MMR's first pass and refreshes agree).
        for (size_t i = 0; i < n; ++i) {
          float one;
          rk::dot_f32(v.data(), &fp[i], 1, dim, &one, level);
          EXPECT_EQ(one, dot[i]) << kn::level_name(level) << " dim " << dim << " row " << i;
          rk::l2sq_f32(v.data(), &fp[i], 1, dim, &one, level);
          EXPECT_EQ(one, l2[i]) << kn::level_name(level) << " dim " << dim << " row " << i;
        }
      }
    }
  }
}
