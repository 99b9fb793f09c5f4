#include "fusion/mmr_batch.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/parallel.h"
#include "kernels/distances.h"

namespace medretrieve::fusion {

namespace {

void require_finite(const float* v, size_t n, const std::string& what, const char* name) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) throw std::invalid_argument(what + name + " contains NaN or inf");
}

template <typename T>
std::vector<const T*> row_pointers(const T* rows, size_t n, size_t dim) {
  std::vector<const T*> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = rows + i * dim;
  return out;
}

}  // namespace

void check_problem(const MmrProblem& p, const std::string& what) {
  if (p.int8 && p.dim > kernels::kMaxInt8Dim)
    throw std::invalid_argument(what + "int8 vectors longer than 131072 are not supported");
  if (p.scales) {
    if (!p.int8) throw std::invalid_argument(what + "scales apply only to int8 candidates");
    require_finite(p.scales, p.n, what, "scales");
    for (size_t i = 0; i < p.n; ++i)
      if (p.scales[i] < 0.f) throw std::invalid_argument(what + "scales must be >= 0");
  }
  if (p.query) require_finite(p.query, p.dim, what, "query");
  if (p.relevance) require_finite(p.relevance, p.n, what, "relevance");
  if (!p.query && !p.relevance) throw std::invalid_argument(what + "give a query or a relevance vector");
}

const float* problem_relevance(const MmrProblem& p, Metric metric, std::vector<float>& buf) {
  if (p.relevance) return p.relevance;
  buf.resize(p.n);
  if (p.int8)
    relevance_i8(p.query, row_pointers(p.i8, p.n, p.dim).data(), p.scales, p.n, p.dim, metric, buf.data());
  else
    relevance_f32(p.query, row_pointers(p.f32, p.n, p.dim).data(), p.n, p.dim, metric, buf.data());
  return buf.data();
}

float i8_pair_form(const MmrProblem& p, Metric metric, std::vector<float>& scale, std::vector<float>& offset) {
  scale.assign(p.n, 1.f);
  offset.clear();
  if (p.scales) std::copy(p.scales, p.scales + p.n, scale.begin());
  const auto& kt = kernels::active();
  if (metric == Metric::L2) {
    offset.resize(p.n);
    for (size_t i = 0; i < p.n; ++i) {
      const int8_t* r = p.i8 + i * p.dim;
      offset[i] = -scale[i] * scale[i] * float(kt.dot_i8(r, r, p.dim));
    }
    return 2.f;
  }
  if (metric == Metric::Cosine) {
    for (size_t i = 0; i < p.n; ++i) {
      const int8_t* r = p.i8 + i * p.dim;
      const float nn = float(kt.dot_i8(r, r, p.dim));
      scale[i] = (nn > 0.f && scale[i] > 0.f) ? 1.f / std::sqrt(nn) : 0.f;
    }
  }
  return 1.f;
}

MmrResult mmr_solve(const MmrProblem& p, size_t k, Metric metric) {
  std::vector<float> rel_buf;
  const float* rel = problem_relevance(p, metric, rel_buf);
  if (p.int8) {
    std::vector<float> scale, offset;
    const float weight = i8_pair_form(p, metric, scale, offset);
    return mmr_select_i8(row_pointers(p.i8, p.n, p.dim).data(), scale.data(), offset.empty() ? nullptr : offset.data(),
                         0.f, weight, p.n, p.dim, rel, k, p.lambda);
  }
  return mmr_select_f32(row_pointers(p.f32, p.n, p.dim).data(), p.n, p.dim, rel, k, p.lambda, metric);
}

std::vector<MmrResult> mmr_batch(const std::vector<MmrProblem>& problems, size_t k, Metric metric, long long threads) {
  std::vector<MmrResult> out(problems.size());
  parallel_for(0, problems.size(), threads, [&](size_t b, size_t) { out[b] = mmr_solve(problems[b], k, metric); });
  return out;
}

PackedMmrBatch pack_mmr_batch(const std::vector<MmrProblem>& problems, size_t k, Metric metric) {
  PackedMmrBatch out;
  const size_t B = problems.size();
  out.offsets.assign(B + 1, 0);
  if (B == 0) return out;
  out.int8 = problems[0].int8;
  out.dim = problems[0].dim;
  size_t max_n = 0;
  for (size_t b = 0; b < B; ++b) {
    const MmrProblem& p = problems[b];
    if (p.int8 != out.int8 || p.dim != out.dim)
      throw std::invalid_argument("cuda MMR batch: every candidate matrix must share dtype and dim");
    out.offsets[b + 1] = out.offsets[b] + int64_t(p.n);
    max_n = std::max(max_n, p.n);
  }
  out.k = std::min(k, max_n);  // k > n selects n: the device outputs are sized by the largest problem
  const size_t total = size_t(out.offsets[B]), dim = out.dim;
  out.relevance.resize(total);
  out.lambdas.resize(B);
  if (out.int8) {
    out.rows_i8.resize(total * dim);
    out.scale.resize(total);
    out.offset.assign(total, 0.f);
  } else {
    out.rows_f32.resize(total * dim);
  }
  for (size_t b = 0; b < B; ++b) {
    const MmrProblem& p = problems[b];
    const size_t at = size_t(out.offsets[b]);
    std::vector<float> buf;
    const float* r = problem_relevance(p, metric, buf);
    std::copy(r, r + p.n, out.relevance.begin() + at);
    out.lambdas[b] = p.lambda;
    if (out.int8) {
      std::copy(p.i8, p.i8 + p.n * dim, out.rows_i8.begin() + at * dim);
      std::vector<float> s, o;
      out.weight = i8_pair_form(p, metric, s, o);  // the same for every problem: it depends on the metric only
      std::copy(s.begin(), s.end(), out.scale.begin() + at);
      std::copy(o.begin(), o.end(), out.offset.begin() + at);
    } else {
      std::copy(p.f32, p.f32 + p.n * dim, out.rows_f32.begin() + at * dim);
    }
  }
  return out;
}

std::vector<MmrResult> unpack_mmr_batch(const std::vector<MmrProblem>& problems, const PackedMmrBatch& packed,
                                        const int64_t* order, const float* scores) {
  std::vector<MmrResult> out(problems.size());
  const size_t k = packed.k;
  for (size_t b = 0; b < problems.size(); ++b) {
    const size_t kb = std::min(k, problems[b].n);
    out[b].order.assign(order + b * k, order + b * k + kb);
    out[b].scores.assign(scores + b * k, scores + b * k + kb);
  }
  return out;
}

}  // namespace medretrieve::fusion
