// NormRange: which inner-product indexes diversify their links by direction.
#include <gtest/gtest.h>

#include <vector>

#include "index/norm_range.h"

using medretrieve::index::NormRange;

TEST(NormRange, UnitRowsAreNotVaried) {
  NormRange r;
  EXPECT_FALSE(r.known());
  std::vector<float> rows = {1.f, 0.f, 0.f, 0.6f, 0.8f, 0.f, 0.f, 0.f, 1.f};
  r.note_rows(rows.data(), 3, 3);
  EXPECT_TRUE(r.known());
  EXPECT_FALSE(r.varied());
}

TEST(NormRange, SpreadBeyondTheFactorIsVariedAndStaysSo) {
  NormRange r;
  std::vector<float> a = {8.f, 0.f};
  r.note_rows(a.data(), 1, 2);
  EXPECT_FALSE(r.varied());
  std::vector<float> b = {0.f, 8.f * NormRange::kSpread * 1.01f};
  r.note_rows(b.data(), 1, 2);
  EXPECT_TRUE(r.varied());
  std::vector<float> c = {8.f, 0.f};  // later rows never narrow the range
  r.note_rows(c.data(), 1, 2);
  EXPECT_TRUE(r.varied());
}

TEST(NormRange, ZeroRowsSayNothing) {
  NormRange r;
  std::vector<float> rows = {0.f, 0.f, 3.f, 4.f};  // a zero row and a row of norm 5
  r.note_rows(rows.data(), 2, 2);
  EXPECT_FALSE(r.varied());
}

TEST(NormRange, StoredElementsAreSampled) {
  NormRange r;
  r.note_stored(50000, [](size_t i) { return i % 2 ? 7.f : 9.f; });
  EXPECT_TRUE(r.known());
  EXPECT_TRUE(r.varied());
}
