// SearchPool against a plain reference: after every insertion it holds the
// `capacity` smallest (distance, id) pairs seen, in order, and expand_next
// returns the closest element not yet expanded. Distances come from a few
// values so that ties (exact duplicates in real data) are common.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "index/search_pool.h"

using medretrieve::index::SearchPool;
using Pair = std::pair<float, uint32_t>;

namespace {
// The `capacity` smallest (distance, id) pairs, in order.
std::vector<Pair> closest(std::vector<Pair> seen, size_t capacity) {
  std::sort(seen.begin(), seen.end());
  seen.resize(std::min(seen.size(), capacity));
  return seen;
}
}  // namespace

TEST(SearchPool, KeepsTheClosestInOrderAndExpandsClosestFirst) {
  std::mt19937 rng(7);
  for (size_t capacity : {1u, 2u, 5u, 17u, 64u}) {
    SearchPool pool(capacity);
    std::vector<Pair> seen;  // every insertion
    std::set<uint32_t> expanded;
    std::uniform_int_distribution<int> value(0, 40), action(0, 3);
    for (uint32_t id = 0; id < 600; ++id) {
      if (action(rng) == 0 && pool.has_unexpanded()) {
        // Reference: the smallest kept pair not expanded yet.
        uint32_t expect = UINT32_MAX;
        for (const auto& c : closest(seen, capacity))
          if (!expanded.count(c.second)) {
            expect = c.second;
            break;
          }
        uint32_t peeked = 0;
        ASSERT_TRUE(pool.peek_next(peeked));
        const uint32_t got = pool.expand_next();
        ASSERT_EQ(got, expect);
        ASSERT_EQ(peeked, got);
        expanded.insert(got);
      }
      const float d = float(value(rng)) * 0.25f - 3.f;
      const auto before = closest(seen, capacity);
      const bool among = before.size() < capacity || std::make_pair(d, id) < before.back();
      EXPECT_EQ(pool.insert(d, id), among);
      seen.emplace_back(d, id);
      const auto kept = closest(seen, capacity);
      ASSERT_EQ(pool.size(), kept.size());
      for (size_t i = 0; i < kept.size(); ++i) {
        ASSERT_EQ(pool.distance(i), kept[i].first);
        ASSERT_EQ(pool.id(i), kept[i].second);
      }
      bool any_open = false;
      for (const auto& c : kept) any_open |= !expanded.count(c.second);
      ASSERT_EQ(pool.has_unexpanded(), any_open);
    }
  }
}

TEST(SearchPool, EmptyPoolHasNothingToExpand) {
  SearchPool pool(4);
  uint32_t id = 0;
  EXPECT_FALSE(pool.has_unexpanded());
  EXPECT_FALSE(pool.peek_next(id));
  EXPECT_EQ(pool.size(), 0u);
}
