// The sign sketches of int8 codes and the sketch scan (index/sketch.h, index/sketch_scan.h): the table's estimate
// holds the codes' signs, the scan keeps the exact scan's answers (all of them once it re-scores
// every row), honours deletions, never returns a row outside the list, and the sketches a load derives are the
// ones the adds wrote. Small sizes: these run under ASan/UBSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "index/filter.h"
#include "index/sketch.h"
#include "index/sketch_scan.h"
#include "index/vector_store.h"

using namespace medretrieve::index;

namespace {

// n unit rows of dim floats around 20 random directions (inner-product data with neighbours to find).
std::vector<float> unit_rows(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> centres(20 * dim), out(n * dim);
  for (float& c : centres) c = nd(rng);
  for (size_t i = 0; i < n; ++i) {
    double norm = 0;
    for (size_t j = 0; j < dim; ++j) {
      out[i * dim + j] = centres[(i % 20) * dim + j] + 1.5f * nd(rng);
      norm += double(out[i * dim + j]) * out[i * dim + j];
    }
    for (size_t j = 0; j < dim; ++j) out[i * dim + j] = float(out[i * dim + j] / std::sqrt(norm));
  }
  return out;
}

// An int8 inner-product store holding x's rows (ids 0..n), sketches kept.
void fill(VectorStore& s, const std::vector<float>& x, size_t n) {
  s.reserve(n);
  s.train(x.data(), n);
  std::vector<uint64_t> ext(n);
  for (size_t i = 0; i < n; ++i) ext[i] = i;
  const uint32_t first = s.allocate(ext.data(), n);
  for (size_t i = 0; i < n; ++i) s.encode(first + uint32_t(i), x.data() + i * s.dim());
}

std::vector<uint32_t> every_other(size_t n) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < n; i += 2) ids.push_back(i);
  return ids;
}

}  // namespace

TEST(SignSketches, ARowHoldsItsCodesSignsAndScale) {
  for (size_t dim : {1u, 63u, 64u, 65u, 200u}) {
    std::vector<int8_t> code(dim);
    for (size_t d = 0; d < dim; ++d) code[d] = int8_t(int(d % 5) - 2);  // -2 .. 2: zero is "not above the centre"
    SignSketches sk(dim);
    sk.reserve(3, 0);
    sk.set(2, code.data(), 0.5f, dim);
    ASSERT_EQ(sk.words(), (dim + 63) / 64);
    double l1 = 0, l2 = 0;
    for (int8_t c : code) l1 += std::abs(c), l2 += double(c) * c;
    EXPECT_FLOAT_EQ(sk.scale(2), float(0.5 * l2 / l1)) << "|r|^2 / |r|_1 of r = 0.5 code";
    for (size_t d = 0; d < 64 * sk.words(); ++d)
      EXPECT_EQ(sk.row(2)[d / 64] >> (d % 64) & 1, d < dim && code[d] > 0 ? 1u : 0u) << "dim " << dim << " bit " << d;
    sk.reserve(5, 3);  // growing keeps the rows
    for (size_t d = 0; d < dim; ++d) EXPECT_EQ(sk.row(2)[d / 64] >> (d % 64) & 1, code[d] > 0 ? 1u : 0u);
    EXPECT_FLOAT_EQ(sk.scale(2), float(0.5 * l2 / l1));
  }
}

TEST(SketchScan, KeepsTheExactScansAnswers) {
  const size_t n = 6000, dim = 48, k = 10;
  const std::vector<float> x = unit_rows(n, dim, 7);
  VectorStore s(Space::IP, DType::Int8, dim, 0, false, /*sketch=*/true);
  fill(s, x, n);
  ASSERT_NE(s.sketches(), nullptr);
  const std::vector<uint32_t> ids = every_other(n);
  ElementFilter filter{&s, nullptr, nullptr, nullptr, nullptr};
  ASSERT_TRUE(sketch_scan_applies(s, filter, ids.size(), k, k));
  size_t hit = 0, want = 0;
  QueryCtx ctx;
  for (size_t qi = 0; qi < 40; ++qi) {
    s.prepare_query(x.data() + (2 * qi + 1) * dim, ctx);  // a row the list leaves out
    const auto exact = exact_topk(s, ctx, filter, ids.data(), ids.size(), k, false);
    const auto found = sketch_topk(s, ctx, filter, ids.data(), ids.size(), k, k, false);
    ASSERT_EQ(found.size(), k);
    std::set<uint32_t> truth;
    for (const Candidate& c : exact) truth.insert(c.second);
    for (const Candidate& c : found) {
      EXPECT_EQ(c.second % 2, 0u) << "a row outside the list";
      hit += truth.count(c.second);
    }
    want += k;
    EXPECT_TRUE(std::is_sorted(found.begin(), found.end()));
    // Re-scoring every row of the list (ef past it) is the exact scan.
    const auto all = sketch_topk(s, ctx, filter, ids.data(), ids.size(), k, ids.size(), false);
    EXPECT_EQ(all, exact);
  }
  EXPECT_GE(double(hit) / double(want), 0.95);
}

TEST(SketchScan, SkipsDeletedRowsAndPredicatesAndTheL2Space) {
  const size_t n = 4000, dim = 32, k = 10;
  const std::vector<float> x = unit_rows(n, dim, 11);
  VectorStore s(Space::IP, DType::Int8, dim, 0, false, /*sketch=*/true);
  fill(s, x, n);
  std::vector<uint32_t> ids(n);
  for (uint32_t i = 0; i < n; ++i) ids[i] = i;
  QueryCtx ctx;
  s.prepare_query(x.data(), ctx);
  ElementFilter filter{&s, nullptr, nullptr, nullptr, nullptr};
  const auto before = sketch_topk(s, ctx, filter, ids.data(), n, k, k, false);
  for (const Candidate& c : before) {
    s.set_deleted(c.second, true);
    s.note_deleted_delta(1);
  }
  const auto after = sketch_topk(s, ctx, filter, ids.data(), n, k, k, false);
  ASSERT_EQ(after.size(), k);
  for (const Candidate& c : after) EXPECT_FALSE(s.is_deleted(c.second));

  const IdPredicate odd = [](uint32_t id) { return id % 2 == 1; };
  EXPECT_FALSE(sketch_scan_applies(s, ElementFilter{&s, nullptr, nullptr, &odd, nullptr}, n, k, k));
  EXPECT_FALSE(sketch_scan_applies(s, filter, 4 * 40 * k - 1, k, k)) << "a short list is scanned exactly";
  EXPECT_EQ(VectorStore(Space::L2, DType::Int8, dim, 0, false, true).sketches(), nullptr);
  EXPECT_EQ(VectorStore(Space::IP, DType::Float32, dim, 0, false, true).sketches(), nullptr);
}

// The scan's first floor comes from a sample of the list, deleted rows included. Here every second row lies right
// beside the query and is deleted, so every live row lies below that floor: the scan reads the list again without
// it and returns the k best live rows (one row in 32 lies at a spread of angles from the query, the rest at random).
TEST(SketchScan, FindsTheLiveRowsBelowADeletedFloor) {
  const size_t n = 8192, dim = 32, k = 10;
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> lean(0.1f, 2.f);
  std::vector<float> x(n * dim);
  for (size_t i = 0; i < n; ++i) {
    float* row = &x[i * dim];
    for (size_t j = 0; j < dim; ++j) row[j] = (i % 2 == 0 ? 0.05f : 1.f) * nd(rng);
    if (i % 2 == 0) row[0] += 1.f;               // beside the query (e_0)
    if (i % 32 == 1) row[0] += 4.f * lean(rng);  // toward it, by a spread of angles
    double norm = 0;
    for (size_t j = 0; j < dim; ++j) norm += double(row[j]) * row[j];
    for (size_t j = 0; j < dim; ++j) row[j] = float(row[j] / std::sqrt(norm));
  }
  VectorStore s(Space::IP, DType::Int8, dim, 0, false, /*sketch=*/true);
  fill(s, x, n);
  std::vector<uint32_t> ids(n);
  for (uint32_t i = 0; i < n; ++i) ids[i] = i;
  for (uint32_t i = 0; i < n; i += 2) {
    s.set_deleted(i, true);
    s.note_deleted_delta(1);
  }
  std::vector<float> query(dim, 0.f);
  query[0] = 1.f;
  QueryCtx ctx;
  s.prepare_query(query.data(), ctx);
  ElementFilter filter{&s, nullptr, nullptr, nullptr, nullptr};
  const auto exact = exact_topk(s, ctx, filter, ids.data(), n, k, false);
  const auto found = sketch_topk(s, ctx, filter, ids.data(), n, k, k, false);
  ASSERT_EQ(found.size(), k);
  std::set<uint32_t> truth;
  for (const Candidate& c : exact) truth.insert(c.second);
  size_t hit = 0;
  for (const Candidate& c : found) {
    EXPECT_FALSE(s.is_deleted(c.second)) << c.second;
    hit += truth.count(c.second);
  }
  EXPECT_GE(hit, 9u);
}

TEST(SignSketches, ALoadDerivesTheSketchesTheAddsWrote) {
  const size_t n = 500, dim = 40;
  const std::vector<float> x = unit_rows(n, dim, 5);
  VectorStore a(Space::Cosine, DType::Int8, dim, 8, false, /*sketch=*/true);
  fill(a, x, n);
  VectorStore b(Space::Cosine, DType::Int8, dim, 8, false, /*sketch=*/true);
  b.reserve(n);
  std::memcpy(b.slab_data(), a.slab_data(), n * a.stride());
  std::vector<uint64_t> ext(n);
  for (size_t i = 0; i < n; ++i) ext[i] = i;
  b.restore(n, ext.data());
  const size_t bytes = a.sketches()->stride() * sizeof(uint64_t);
  for (uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(a.sketches()->row(i), b.sketches()->row(i), bytes), 0) << "row " << i;
  // Kept on demand, they are the ones the adds wrote; freed, none are left.
  VectorStore c(Space::Cosine, DType::Int8, dim, 8, false);
  fill(c, x, n);
  ASSERT_EQ(c.sketches(), nullptr);
  c.keep_sketches(true);
  ASSERT_NE(c.sketches(), nullptr);
  for (uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(a.sketches()->row(i), c.sketches()->row(i), bytes), 0) << "row " << i;
  c.keep_sketches(false);
  EXPECT_EQ(c.sketches(), nullptr);
  // The memory report counts them.
  EXPECT_EQ(a.memory_bytes() - c.memory_bytes(), n * bytes);
}
