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

using medretrieve::index::ScreenedPool;
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

// ScreenedPool against the same kind of reference: every element closer than
// the ef-th allowed one seen so far is kept (allowed or not), the allowed ones
// are the result, and expansion goes closest first among the kept elements.
TEST(ScreenedPool, KeepsWhatLiesBeforeTheEfthAllowedAndExpandsClosestFirst) {
  std::mt19937 rng(11);
  for (size_t ef : {1u, 3u, 10u, 40u}) {
    for (int allowed_in_8 : {1, 4, 8}) {
      ScreenedPool pool;
      pool.reset(ef);
      std::vector<std::pair<Pair, bool>> kept;  // reference: sorted, cut after the ef-th allowed
      std::set<uint32_t> expanded;
      std::uniform_int_distribution<int> value(0, 40), action(0, 3), pass(0, 7);
      for (uint32_t id = 0; id < 500; ++id) {
        if (action(rng) == 0 && pool.has_unexpanded()) {
          uint32_t expect = UINT32_MAX;
          for (const auto& c : kept)
            if (!expanded.count(c.first.second)) {
              expect = c.first.second;
              break;
            }
          uint32_t peeked = 0;
          ASSERT_TRUE(pool.peek_next(peeked));
          const uint32_t got = pool.expand_next();
          ASSERT_EQ(got, expect);
          ASSERT_EQ(peeked, got);
          expanded.insert(got);
        }
        const Pair item{float(value(rng)) * 0.25f - 3.f, id};
        const bool allowed = pass(rng) < allowed_in_8;
        size_t allowed_kept = 0;
        for (const auto& c : kept) allowed_kept += c.second;
        const bool admits = allowed_kept < ef || item.first < kept.back().first.first;
        ASSERT_EQ(pool.admits(item.first), admits);
        pool.insert(item.first, item.second, allowed);
        if (admits) {
          kept.insert(std::upper_bound(kept.begin(), kept.end(), std::make_pair(item, allowed),
                                       [](const auto& a, const auto& b) { return a.first < b.first; }),
                      {item, allowed});
          size_t seen = 0, cut = kept.size();
          for (size_t i = 0; i < kept.size(); ++i)
            if (kept[i].second && ++seen == ef) {
              cut = i + 1;
              break;
            }
          kept.resize(cut);
        }
        std::vector<Pair> got, want;
        pool.take_allowed(got);
        for (const auto& c : kept)
          if (c.second) want.push_back(c.first);
        ASSERT_EQ(got, want) << "ef " << ef << " after id " << id;
        bool any_open = false;
        for (const auto& c : kept) any_open |= !expanded.count(c.first.second);
        ASSERT_EQ(pool.has_unexpanded(), any_open);
      }
    }
  }
}
