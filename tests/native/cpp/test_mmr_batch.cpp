// MMR batch (fusion/mmr_batch.h): a batch on the thread pool gives each
// problem's own answer, int8 candidates in the pair form pick like their
// dequantized float rows, bad problems are named, and the accelerator
// packing keeps every problem's rows, relevance and k.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusion/mmr_batch.h"

using namespace medretrieve::fusion;
using medretrieve::Metric;

namespace {

struct Owned {  // the arrays a problem points into
  std::vector<float> f32, scales, query;
  std::vector<int8_t> i8;
};

MmrProblem make_problem(Owned& o, size_t n, size_t dim, bool int8, uint32_t seed, float lambda) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> sc(0.01f, 0.05f);
  o.query.resize(dim);
  for (float& q : o.query) q = nd(rng);
  MmrProblem p;
  p.n = n;
  p.dim = dim;
  p.lambda = lambda;
  p.query = o.query.data();
  if (int8) {
    o.i8.resize(n * dim);
    o.scales.resize(n);
    for (auto& c : o.i8) c = int8_t(code(rng));
    for (auto& s : o.scales) s = sc(rng);
    p.int8 = true;
    p.i8 = o.i8.data();
    p.scales = o.scales.data();
  } else {
    o.f32.resize(n * dim);
    for (float& x : o.f32) x = nd(rng);
    p.f32 = o.f32.data();
  }
  return p;
}

}  // namespace

TEST(MmrBatch, ThreadedBatchEqualsOneProblemAtATime) {
  for (Metric metric : {Metric::IP, Metric::L2, Metric::Cosine}) {
    std::vector<Owned> owned(9);
    std::vector<MmrProblem> problems;
    for (size_t b = 0; b < owned.size(); ++b)
      problems.push_back(make_problem(owned[b], 5 + 7 * b, 12, b % 2 == 1, uint32_t(b + 1), 0.1f * float(b)));
    const std::vector<MmrResult> batch = mmr_batch(problems, 6, metric, 3);
    ASSERT_EQ(batch.size(), problems.size());
    for (size_t b = 0; b < problems.size(); ++b) {
      const MmrResult one = mmr_solve(problems[b], 6, metric);
      EXPECT_EQ(batch[b].order, one.order) << medretrieve::metric_name(metric) << " problem " << b;
      EXPECT_EQ(batch[b].scores, one.scores);
      EXPECT_EQ(batch[b].order.size(), std::min<size_t>(6, problems[b].n));
    }
  }
}

TEST(MmrBatch, Int8PairFormPicksLikeTheDequantizedRows) {
  for (Metric metric : {Metric::IP, Metric::L2, Metric::Cosine}) {
    Owned o;
    const MmrProblem p = make_problem(o, 40, 16, true, 7, 0.6f);
    Owned d;  // the same candidates as float rows scale * code
    d.f32.resize(o.i8.size());
    for (size_t i = 0; i < p.n; ++i)
      for (size_t j = 0; j < p.dim; ++j) d.f32[i * p.dim + j] = o.scales[i] * float(o.i8[i * p.dim + j]);
    MmrProblem f = p;
    f.int8 = false;
    f.i8 = nullptr;
    f.scales = nullptr;
    f.f32 = d.f32.data();
    const MmrResult got = mmr_solve(p, 10, metric), want = mmr_solve(f, 10, metric);
    EXPECT_EQ(got.order, want.order) << medretrieve::metric_name(metric);
    for (size_t i = 0; i < got.scores.size(); ++i)
      EXPECT_NEAR(got.scores[i], want.scores[i], 1e-4f * (1.f + std::fabs(want.scores[i])));
  }
}

TEST(MmrBatch, BadProblemsAreNamedAndErrorsLeaveTheBatch) {
  Owned o;
  MmrProblem p = make_problem(o, 4, 3, true, 3, 0.5f);
  EXPECT_NO_THROW(check_problem(p, ""));
  o.scales[2] = -1.f;
  try {
    check_problem(p, "query 2: ");
    FAIL() << "a negative scale passed";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "query 2: scales must be >= 0");
  }
  o.scales[2] = 1.f;
  o.query[1] = NAN;
  EXPECT_THROW(check_problem(p, ""), std::invalid_argument);
  p.query = nullptr;
  EXPECT_THROW(check_problem(p, ""), std::invalid_argument);  // neither query nor relevance
  // A problem the operator fails on inside the pool (a row whose similarities
  // are not finite) stops the batch with the core's error.
  Owned ok, bad;
  MmrProblem nan_rows = make_problem(bad, 6, 3, false, 5, 0.5f);
  bad.f32[4] = NAN;
  std::vector<MmrProblem> batch = {make_problem(ok, 6, 3, false, 4, 0.5f), nan_rows};
  EXPECT_THROW(mmr_batch(batch, 2, Metric::IP, 2), std::invalid_argument);
}

TEST(MmrBatch, PackingKeepsRowsRelevanceAndClampsK) {
  std::vector<Owned> owned(3);
  std::vector<MmrProblem> problems;
  const size_t sizes[] = {3, 8, 5};
  for (size_t b = 0; b < 3; ++b) problems.push_back(make_problem(owned[b], sizes[b], 4, true, uint32_t(10 + b), 0.5f));
  const PackedMmrBatch p = pack_mmr_batch(problems, 50, Metric::L2);
  ASSERT_EQ(p.offsets, (std::vector<int64_t>{0, 3, 11, 16}));
  EXPECT_EQ(p.k, 8u);  // the largest problem
  EXPECT_EQ(p.weight, 2.f);
  for (size_t b = 0; b < 3; ++b) {
    std::vector<float> buf;
    const float* rel = problem_relevance(problems[b], Metric::L2, buf);
    for (size_t i = 0; i < sizes[b]; ++i) {
      EXPECT_EQ(p.relevance[size_t(p.offsets[b]) + i], rel[i]);
      EXPECT_EQ(p.rows_i8[(size_t(p.offsets[b]) + i) * 4], owned[b].i8[i * 4]);
    }
  }
  std::vector<int64_t> order(3 * p.k);
  std::vector<float> scores(3 * p.k);
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = int64_t(i);
    scores[i] = float(i);
  }
  const std::vector<MmrResult> r = unpack_mmr_batch(problems, p, order.data(), scores.data());
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].order, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(r[2].order.front(), 16);
  EXPECT_EQ(r[2].order.size(), 5u);
  Owned f;
  problems.push_back(make_problem(f, 2, 4, false, 20, 0.5f));
  EXPECT_THROW(pack_mmr_batch(problems, 2, Metric::IP), std::invalid_argument);  // dtypes differ
}
