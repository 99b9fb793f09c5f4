// The CUDA back end's host side (cuda/host.h), in every build: without a
// usable device each operation throws "CUDA is not available: <why>"; with
// one, the packed GPU batch gives what the CPU operators give.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/host.h"
#include "fusion/mmr_batch.h"
#include "fusion/rrf.h"

using namespace medretrieve;

namespace {

// Three float32 problems of different sizes (one smaller than k) over shared storage.
struct Batch {
  std::vector<std::vector<float>> rows, queries;
  std::vector<fusion::MmrProblem> problems;
};

Batch random_batch(size_t dim) {
  Batch b;
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  const size_t sizes[] = {40, 3, 17};
  for (size_t n : sizes) {
    b.rows.emplace_back(n * dim);
    b.queries.emplace_back(dim);
    for (float& v : b.rows.back()) v = g(rng);
    for (float& v : b.queries.back()) v = g(rng);
  }
  const float lambdas[] = {0.3f, 0.5f, 0.9f};
  for (size_t i = 0; i < b.rows.size(); ++i) {
    fusion::MmrProblem p;
    p.f32 = b.rows[i].data();
    p.n = b.rows[i].size() / dim;
    p.dim = dim;
    p.query = b.queries[i].data();
    p.lambda = lambdas[i];
    b.problems.push_back(p);
  }
  return b;
}

void expect_unavailable(const std::function<void()>& call) {
  try {
    call();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("CUDA is not available: ", 0), 0u) << e.what();
  }
}

}  // namespace

TEST(CudaHost, SaysWhyWhenUnusable) {
  std::string why;
  if (cuda::usable(&why)) GTEST_SKIP() << "a usable GPU is present";
  EXPECT_FALSE(why.empty());
  Batch b = random_batch(8);
  const int64_t ids[] = {1, 2, 3};
  const std::vector<fusion::IdList> lists = {{ids, 3}};
  expect_unavailable([&] { cuda::mmr_batch(b.problems, 5, Metric::IP); });
  expect_unavailable([&] { cuda::rrf_lists(lists, 60.0, nullptr, 0); });
  expect_unavailable([] { cuda::usable_device_summary(); });
  expect_unavailable([] { cuda::require_usable(); });
}

TEST(CudaHost, MmrBatchMatchesCpu) {
  if (!cuda::usable()) GTEST_SKIP() << "no usable CUDA device";
  Batch b = random_batch(24);
  const auto gpu = cuda::mmr_batch(b.problems, 5, Metric::IP);
  const auto cpu = fusion::mmr_batch(b.problems, 5, Metric::IP, 1);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].order, cpu[i].order) << "problem " << i;
    ASSERT_EQ(gpu[i].scores.size(), cpu[i].scores.size());
    for (size_t j = 0; j < cpu[i].scores.size(); ++j) EXPECT_NEAR(gpu[i].scores[j], cpu[i].scores[j], 1e-4);
  }
  EXPECT_TRUE(cuda::mmr_batch({}, 5, Metric::IP).empty());
}

TEST(CudaHost, RrfMatchesCpu) {
  if (!cuda::usable()) GTEST_SKIP() << "no usable CUDA device";
  const std::vector<int64_t> a = {5, 1, 9, 5, 3}, b = {9, 2}, c = {};
  const std::vector<fusion::IdList> lists = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), 0}};
  const double weights[] = {1.0, 0.5, 2.0};
  const fusion::Fused gpu = cuda::rrf_lists(lists, 60.0, weights, 3);
  const fusion::Fused cpu = fusion::rrf(lists, 60.0, weights, 3);
  EXPECT_EQ(gpu.ids, cpu.ids);
  EXPECT_EQ(gpu.scores, cpu.scores);
}
