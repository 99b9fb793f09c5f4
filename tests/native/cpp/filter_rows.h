// Test data of the row-filter tests (test_allowed_rows.cpp, test_search_mmr_allowed.cpp): graph parameters,
// clustered rows and a bitset over ids.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "index/hnsw.h"

namespace filter_rows {

// Small-graph parameters of these tests (M 12, ef_construction 80; default space and dtype).
inline medretrieve::index::HnswParams params(size_t dim, size_t n) {
  medretrieve::index::HnswParams p;
  p.dim = dim;
  p.max_elements = n;
  p.M = 12;
  p.ef_construction = 80;
  return p;
}

// n rows of dim floats around six cluster centres (row i in cluster i % 6).
inline std::vector<float> clustered_rows(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> out(n * dim);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < dim; ++j) out[i * dim + j] = float(i % 6) + 0.7f * nd(rng);  // six clusters
  return out;
}

// The packed bitset (bit id % 64 of word id / 64) of `ids` over `size` ids.
inline std::vector<uint64_t> bits_of(const std::vector<uint64_t>& ids, size_t size) {
  std::vector<uint64_t> w((size + 63) / 64, 0);
  for (uint64_t id : ids) w[id >> 6] |= uint64_t(1) << (id & 63);
  return w;
}

// The exact top-k ids (squared L2 in double, ties by id) among `ids`, rows of dim floats in x.
template <class Ids>
std::vector<int64_t> exact_top(const std::vector<float>& x, size_t dim, const float* q, size_t k, const Ids& ids) {
  std::vector<std::pair<double, int64_t>> s;
  for (const auto j : ids) {
    double d = 0;
    for (size_t t = 0; t < dim; ++t) d += (double(q[t]) - x[j * dim + t]) * (double(q[t]) - x[j * dim + t]);
    s.emplace_back(d, int64_t(j));
  }
  std::sort(s.begin(), s.end());
  std::vector<int64_t> out;
  for (size_t t = 0; t < std::min(k, s.size()); ++t) out.push_back(s[t].second);
  return out;
}

}  // namespace filter_rows
