// Every kernel at every SIMD level this CPU runs, against a float64
// reference, on awkward sizes (0, 1, primes, just below/above block sizes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/distances.h"
#include "kernels/quantizer.h"

using namespace medretrieve::kernels;

namespace {

const size_t kSizes[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97, 127, 128, 129, 191, 192, 193, 255, 256, 257, 384, 767, 768, 1023, 1536};

std::vector<const KernelTable*> levels() {
  std::vector<const KernelTable*> out;
  for (int l = 0; l <= int(SimdLevel::AVX512VNNI); ++l)
    if (auto* t = table_for(SimdLevel(l))) out.push_back(t);
  return out;
}

TEST(Kernels, FloatDotAndL2MatchFloat64Reference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const KernelTable* t : levels()) {
    for (size_t n : kSizes) {
      std::vector<float> a(n), b(n);
      for (auto& v : a) v = nd(rng);
      for (auto& v : b) v = nd(rng);
      double dot = 0, l2 = 0, mag = 0;
      for (size_t i = 0; i < n; ++i) {
        dot += double(a[i]) * b[i];
        l2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        mag += std::fabs(double(a[i]) * b[i]);
      }
      double tol = 1e-5 * (mag + 1.0);
      EXPECT_NEAR(t->dot_f32(a.data(), b.data(), n), dot, tol) << level_name(t->level) << " n=" << n;
      EXPECT_NEAR(t->l2sq_f32(a.data(), b.data(), n), l2, 1e-5 * (l2 + 1.0)) << level_name(t->level) << " n=" << n;
    }
  }
}

TEST(Kernels, Int8DotIsExact) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> ud(-127, 127);
  for (const KernelTable* t : levels()) {
    for (size_t n : kSizes) {
      std::vector<int8_t> a(n), b(n);
      for (auto& v : a) v = int8_t(ud(rng));
      for (auto& v : b) v = int8_t(ud(rng));
      int64_t ref = 0;
      for (size_t i = 0; i < n; ++i) ref += int64_t(a[i]) * b[i];
      EXPECT_EQ(t->dot_i8(a.data(), b.data(), n), ref) << level_name(t->level) << " n=" << n;
    }
    // Extremes: all +-127 must not overflow or saturate.
    std::vector<int8_t> hi(4096, 127), lo(4096, -127);
    EXPECT_EQ(t->dot_i8(hi.data(), lo.data(), hi.size()), -127 * 127 * 4096);
    // Negative times negative: the kernels multiply |a| by b with a's sign moved onto it.
    EXPECT_EQ(t->dot_i8(lo.data(), lo.data(), lo.size()), 127 * 127 * 4096);
    EXPECT_EQ(t->dot_i8(lo.data(), hi.data(), lo.size() - 1), -127 * 127 * 4095);
  }
}

TEST(Kernels, CountBitsMatchesABitByBitCount) {
  std::mt19937_64 rng(5);
  for (const KernelTable* t : levels()) {
    for (size_t n : kSizes) {
      std::vector<uint64_t> w(n);
      for (size_t i = 0; i < n; ++i) w[i] = i % 5 == 0 ? ~uint64_t(0) : i % 5 == 1 ? 0 : rng();
      size_t ref = 0;
      for (uint64_t v : w)
        for (int b = 0; b < 64; ++b) ref += v >> b & 1;
      EXPECT_EQ(t->count_bits(w.data(), n), ref) << level_name(t->level) << " n=" << n;
    }
  }
}

TEST(Kernels, SetBitIdsListEveryBitInOrder) {
  std::mt19937_64 rng(9);
  for (const KernelTable* t : levels()) {
    for (size_t n : kSizes) {
      // Words empty, full, with one bit, with a few (written one by one) and dense random ones (by vectors).
      std::vector<uint64_t> w(n);
      for (size_t i = 0; i < n; ++i)
        w[i] = i % 6 == 0 ? ~uint64_t(0) : i % 6 == 1 ? 0 : i % 6 == 2 ? uint64_t(1) << (i % 64)
             : i % 6 == 3 ? rng() & rng() & rng() & rng() : rng();
      std::vector<uint32_t> ref;
      for (size_t i = 0; i < n * 64; ++i)
        if (w[i / 64] >> (i % 64) & 1) ref.push_back(uint32_t(i));
      std::vector<uint32_t> out(ref.size() + kSetBitIdsSlack, 0xDEADBEEF);
      const size_t got = t->set_bit_ids(w.data(), n, out.data());
      ASSERT_EQ(got, ref.size()) << level_name(t->level) << " n=" << n;
      EXPECT_EQ(std::vector<uint32_t>(out.begin(), out.begin() + ptrdiff_t(got)), ref)
          << level_name(t->level) << " n=" << n;
    }
  }
}

TEST(Kernels, SketchEstimatesScaleTheQuerysBytesOverTheSetBits) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> scale(0.01f, 3.f);
  for (const KernelTable* t : levels())
    for (size_t dim : kSizes)
      for (size_t n : {1, 3, 4, 37}) {  // rows summed four at a time, and the rest one by one
        const size_t words = (dim + 63) / 64;
        std::vector<int8_t> q(64 * words, 0);
        for (size_t d = 0; d < dim; ++d) q[d] = int8_t(code(rng));
        const size_t stride = words + 1;  // the signs, then the row's scale (the sketches' layout)
        std::vector<uint64_t> rows(n * stride);
        std::vector<float> scales(n);
        for (uint64_t& w : rows) w = (uint64_t(rng()) << 32) | rng();
        for (size_t i = 0; i < n; ++i) {
          if (dim % 64) rows[i * stride + words - 1] &= (uint64_t(1) << (dim % 64)) - 1;  // no bit past the dimension
          scales[i] = scale(rng);
          std::memcpy(&rows[i * stride + words], &scales[i], sizeof(float));  // the high bytes stay random
        }
        std::vector<uint32_t> ids(n);
        for (uint32_t i = 0; i < n; ++i) ids[i] = (i * 7) % n;  // out of order
        std::vector<float> out(n, -1.f);
        t->sketch_estimates(q.data(), rows.data(), stride, words, ids.data(), n, out.data());
        for (size_t j = 0; j < n; ++j) {
          int64_t sum = 0;
          for (size_t d = 0; d < dim; ++d) sum += (rows[ids[j] * stride + d / 64] >> (d % 64) & 1) ? q[d] : 0;
          ASSERT_EQ(out[j], float(sum) * scales[ids[j]]) << "dim " << dim << " rows " << n << " level "
                                                         << level_name(t->level);
        }
      }
}

// Rows long enough that a level's narrow partial sums must be widened on the way (AVX2 keeps int16 lanes over 32
// words), every bit set and every query byte at its extreme.
TEST(Kernels, SketchEstimatesHoldLongRowsOfExtremeBytes) {
  for (const KernelTable* t : levels())
    for (size_t dim : {2048, 2049, 4160})
      for (int8_t byte : {int8_t(127), int8_t(-127)}) {
        const size_t words = (dim + 63) / 64, stride = words + 1;
        std::vector<int8_t> q(64 * words, 0);
        std::fill(q.begin(), q.begin() + ptrdiff_t(dim), byte);
        std::vector<uint64_t> rows(stride, ~uint64_t(0));
        if (dim % 64) rows[words - 1] = (uint64_t(1) << (dim % 64)) - 1;
        const float one = 1.f;
        std::memcpy(&rows[words], &one, sizeof one);
        const uint32_t id = 0;
        float out = 0;
        t->sketch_estimates(q.data(), rows.data(), stride, words, &id, 1, &out);
        EXPECT_EQ(out, float(int64_t(byte) * int64_t(dim))) << "dim " << dim << " level " << level_name(t->level);
      }
}

TEST(Kernels, Int8DotOfFourIsExactAndEqualsFourDots) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> ud(-127, 127);
  for (const KernelTable* t : levels()) {
    for (size_t n : kSizes) {
      std::vector<int8_t> q(n), rows(4 * n);
      for (auto& v : q) v = int8_t(ud(rng));
      for (auto& v : rows) v = int8_t(ud(rng));
      const int8_t* b[4] = {rows.data(), rows.data() + n, rows.data() + 2 * n, rows.data() + 3 * n};
      int32_t got[4];
      t->dot_i8_x4(q.data(), b, n, got);
      for (size_t j = 0; j < 4; ++j) {
        int64_t ref = 0;
        for (size_t i = 0; i < n; ++i) ref += int64_t(q[i]) * b[j][i];
        EXPECT_EQ(got[j], ref) << level_name(t->level) << " n=" << n << " j=" << j;
        EXPECT_EQ(got[j], t->dot_i8(q.data(), b[j], n)) << level_name(t->level) << " n=" << n << " j=" << j;
      }
    }
    // Extremes, and rows of different signs in one block.
    std::vector<int8_t> hi(4096, 127), lo(4096, -127);
    const int8_t* b[4] = {hi.data(), lo.data(), hi.data(), lo.data()};
    int32_t got[4];
    t->dot_i8_x4(lo.data(), b, lo.size(), got);
    EXPECT_EQ(got[0], -127 * 127 * 4096) << level_name(t->level);
    EXPECT_EQ(got[1], 127 * 127 * 4096) << level_name(t->level);
  }
}

TEST(Quantizer, RoundTripErrorIsBoundedByHalfAStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (size_t n : {size_t(1), size_t(5), size_t(768)}) {
    std::vector<float> x(n), c(n), out(n);
    std::vector<int8_t> code(n);
    for (auto& v : x) v = nd(rng);
    for (auto& v : c) v = nd(rng) * 0.1f;
    float s = quantize_i8(x.data(), c.data(), n, code.data());
    dequantize_i8(code.data(), s, c.data(), n, out.data());
    for (size_t i = 0; i < n; ++i) EXPECT_LE(std::fabs(out[i] - x[i]), 0.5f * s + 1e-6f);
  }
  std::vector<float> zero(9, 0.f);
  std::vector<int8_t> code(9, 5);
  EXPECT_EQ(quantize_i8(zero.data(), nullptr, 9, code.data()), 0.f);
  for (auto v : code) EXPECT_EQ(v, 0);
}

TEST(Dispatch, ActiveLevelIsSupported) {
  EXPECT_LE(int(active().level), int(cpu_level()));
  EXPECT_NE(table_for(SimdLevel::Scalar), nullptr);
}

}  // namespace

// The rows kernels (a flat scan's blocks of slabs) give the pairwise kernel's
// result to the bit, for every row of a block at any stride, including the
// dims they specialise (16, 32) and awkward ones around them.
TEST(Kernels, RowsKernelsMatchPairwiseBitForBit) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const KernelTable* t : levels()) {
    for (size_t dim : {size_t(0), size_t(1), size_t(7), size_t(15), size_t(16), size_t(17), size_t(31), size_t(32),
                       size_t(33), size_t(384)}) {
      const size_t rows = 37, stride = (dim + 5) * sizeof(float);  // padding between rows, as in the slabs
      std::vector<float> q(dim), slab(rows * (dim + 5));
      for (auto& v : q) v = nd(rng);
      for (auto& v : slab) v = nd(rng);
      const char* base = reinterpret_cast<const char*>(slab.data());
      std::vector<float> dots(rows), l2s(rows);
      t->dot_f32_rows(q.data(), base, stride, dim, rows, dots.data());
      t->l2sq_f32_rows(q.data(), base, stride, dim, rows, l2s.data());
      for (size_t j = 0; j < rows; ++j) {
        const float* row = reinterpret_cast<const float*>(base + j * stride);
        EXPECT_EQ(dots[j], t->dot_f32(q.data(), row, dim)) << level_name(t->level) << " dim=" << dim << " row " << j;
        EXPECT_EQ(l2s[j], t->l2sq_f32(q.data(), row, dim)) << level_name(t->level) << " dim=" << dim << " row " << j;
      }
    }
  }
}
