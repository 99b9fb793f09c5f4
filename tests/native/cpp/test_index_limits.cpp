// Argument limits of the C++ index API: k beyond max(count, kMinMaxK) and
// result sizes that would wrap are refused, and so are ids above 2**63 - 1
// (searches return int64 ids with -1 as padding).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "index/flat.h"
#include "index/hnsw.h"

using namespace medretrieve::index;

TEST(Limits, KBeyondTheIndexAndThePaddingFloorIsRefused) {
  EXPECT_NO_THROW(check_k(kMinMaxK, 3));
  EXPECT_NO_THROW(check_k(5000, 5000));
  EXPECT_THROW(check_k(kMinMaxK + 1, 3), std::invalid_argument);
  EXPECT_THROW(check_k(5001, 5000), std::invalid_argument);
  EXPECT_THROW(result_cells(size_t(1) << 40, size_t(1) << 40), std::invalid_argument);
  EXPECT_EQ(result_cells(3, 7), 21u);

  const size_t dim = 4;
  std::vector<float> x(10 * dim, 0.5f), q(dim, 1.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] += float(i % 7);
  HnswParams p;
  p.space = Space::IP;
  p.dim = dim;
  p.max_elements = 10;
  Hnsw h(p);
  h.add(x.data(), 10, nullptr, nullptr, 1, false, false);
  FlatIndex f(Space::IP, DType::Int8, dim);
  f.add(x.data(), 10, nullptr, nullptr, 1);
  std::vector<int64_t> ids(kMinMaxK);
  std::vector<float> scores(kMinMaxK);
  const size_t huge = size_t(1) << 62;
  EXPECT_THROW(h.search(q.data(), 1, huge, nullptr, 0, nullptr, nullptr, 1, ids.data(), scores.data()),
               std::invalid_argument);
  EXPECT_THROW(f.search(q.data(), 1, huge, nullptr, nullptr, 1, ids.data(), scores.data()), std::invalid_argument);
  h.search(q.data(), 1, kMinMaxK, nullptr, 0, nullptr, nullptr, 1, ids.data(), scores.data());
  EXPECT_EQ(ids[9] >= 0, true);
  EXPECT_EQ(ids[10], -1);  // padding
}

TEST(Limits, IdsAboveInt64AreRefused) {
  const size_t dim = 4;
  std::vector<float> x(2 * dim, 1.f);
  x[dim] = 2.f;
  const uint64_t bad[2] = {5, uint64_t(1) << 63};
  HnswParams p;
  p.dim = dim;
  p.max_elements = 4;
  Hnsw h(p);
  EXPECT_THROW(h.add(x.data(), 2, bad, nullptr, 1, false, false), std::invalid_argument);
  EXPECT_EQ(h.count(), 0u);
  FlatIndex f(Space::L2, DType::Float32, dim);
  EXPECT_THROW(f.add(x.data(), 2, bad, nullptr, 1), std::invalid_argument);
  EXPECT_EQ(f.count(), 0u);
  const uint64_t top[2] = {5, kMaxExtId};
  h.add(x.data(), 2, top, nullptr, 1, false, false);
  EXPECT_TRUE(h.contains(kMaxExtId));
}

// An ef far past the stored elements (a user's or a loaded file's default) costs
// no more memory than ef = count: the search pool is sized by the elements
// (the fuzzer's out-of-memory input had ef near 2**32).
TEST(Limits, EfPastTheElementsAllocatesOnlyForTheElements) {
  const size_t dim = 4, n = 10;
  std::vector<float> x(n * dim), q(dim, 1.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7) % 11) - 5.f;
  HnswParams p;
  p.space = Space::L2;
  p.dim = dim;
  p.max_elements = n;
  Hnsw h(p);
  h.add(x.data(), n, nullptr, nullptr, 1, false, false);
  std::vector<int64_t> ids(n), exact_ids(n);
  std::vector<float> scores(n), exact_scores(n);
  h.set_ef(size_t(1) << 60);
  h.search(q.data(), 1, n, nullptr, 0, nullptr, nullptr, 1, ids.data(), scores.data());
  const size_t ef = n;
  h.search(q.data(), 1, n, &ef, 1, nullptr, nullptr, 1, exact_ids.data(), exact_scores.data());
  EXPECT_EQ(ids, exact_ids);
  EXPECT_EQ(scores, exact_scores);
}
