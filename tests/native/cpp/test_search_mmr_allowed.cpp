// fusion::search_mmr with a row filter: its candidates are Hnsw's filtered
// search (planner included), so MMR picks min(k, allowed live rows), never a
// row outside the filter or a deleted one; with lambda 1 the picks are the
// exact filtered top k. Small sizes: these run under ASan/UBSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "fusion/search_mmr.h"
#include "index/hnsw.h"
#include "filter_rows.h"

using namespace medretrieve;
using index::ExternalBits;

using filter_rows::bits_of;
using filter_rows::clustered_rows;
using filter_rows::params;

namespace {

// The exact filtered top-k (squared L2 in double) of the rows `keep` holds, ids = positions.
std::vector<int64_t> filtered_top(const std::vector<float>& x, size_t dim, const float* q, size_t k,
                                  const std::set<uint64_t>& keep) {
  return filter_rows::exact_top(x, dim, q, k, keep);
}

}  // namespace

TEST(SearchMmrAllowed, PicksOnlyAllowedRowsAtEverySize) {
  const size_t n = 900, dim = 8, k = 6, fetch_k = 30;
  const auto x = clustered_rows(n, dim, 7);
  index::Hnsw h(params(dim, n));
  h.add(x.data(), n, nullptr, nullptr, 1, false, false);
  h.mark_deleted(5);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<uint64_t>> filters = {{}, {17}, {5, 40, 41}, {}, {}, {}};
  for (size_t i = 0; i < n; ++i) {
    if (u(rng) < 0.1) filters[3].push_back(i);    // a random tenth
    if (i % 6 == 5) filters[4].push_back(i);      // one cluster only (correlated with most queries)
    filters[5].push_back(i);                      // everything
  }
  for (const auto& keep : filters) {
    std::set<uint64_t> live(keep.begin(), keep.end());
    live.erase(5);  // deleted
    const auto words = bits_of(keep, n + 64);  // ids past the index's count: never returned
    const ExternalBits bits{words.data(), words.size()};
    for (double factor : {0.0, 1e9}) {  // 0: the graph walk; 1e9: the exact scan of the allowed rows
      h.set_filter_exact_factor(factor);
      for (size_t q = 0; q < 12; ++q) {
        const float* query = x.data() + q * 37 * dim;
        const fusion::SearchMmrResult half = fusion::search_mmr(h, query, k, fetch_k, 0.5f, 64, nullptr, &bits);
        ASSERT_EQ(half.ids.size(), std::min(k, live.size())) << keep.size() << " allowed, factor " << factor;
        for (int64_t id : half.ids) EXPECT_TRUE(live.count(uint64_t(id))) << id;
        EXPECT_EQ(std::set<int64_t>(half.ids.begin(), half.ids.end()).size(), half.ids.size());
        if (factor > 0 && live.size() < n - 1) {  // exact candidates: lambda 1 is the exact filtered top k
          const fusion::SearchMmrResult top = fusion::search_mmr(h, query, k, fetch_k, 1.f, 64, nullptr, &bits);
          EXPECT_EQ(top.ids, filtered_top(x, dim, query, k, live));
        }
      }
    }
  }
}

TEST(SearchMmrAllowed, LabelsAndTheFilterBothPass) {
  const size_t n = 300, dim = 8;
  const auto x = clustered_rows(n, dim, 9);
  index::Hnsw h(params(dim, n));
  std::vector<std::vector<uint32_t>> labels(n);
  for (size_t i = 0; i < n; ++i) labels[i] = {uint32_t(i % 2)};
  h.add(x.data(), n, nullptr, &labels, 1, false, false);
  const auto words = bits_of({10, 11, 12, 13, 14, 15, 16}, n);
  const ExternalBits bits{words.data(), words.size()};
  const index::LabelQuery odd = index::LabelQuery::make({1});
  const fusion::SearchMmrResult r = fusion::search_mmr(h, x.data(), 10, 20, 0.3f, 0, &odd, &bits);
  EXPECT_EQ(std::set<int64_t>(r.ids.begin(), r.ids.end()), (std::set<int64_t>{11, 13, 15}));
}
