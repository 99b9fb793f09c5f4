// Python bindings of the fusion operators (MMR, MMR batch, RRF, score
// fusion): convert types, check arguments, release the GIL. The algorithms
// live in csrc/fusion.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "bindings/args.h"
#include "bindings/bindings.h"
#include "bindings/convert.h"
#include "common/metric.h"
#include "fusion/mmr_batch.h"
#include "fusion/rrf.h"

namespace py = pybind11;
namespace fu = medretrieve::fusion;

namespace medretrieve::bindings {

namespace {

fu::ScoreNorm score_norm(const std::string& method) {
  if (method == "minmax") return fu::ScoreNorm::MinMax;
  if (method == "zscore") return fu::ScoreNorm::ZScore;
  throw py::value_error("method must be 'minmax' or 'zscore', got '" + method + "'");
}

// Score lists beside already read id lists: float32 views kept alive in `keep`.
std::vector<fu::ScoredList> scored_lists(const IdLists& ids, const py::sequence& score_lists,
                                         std::vector<py::array_t<float>>& keep) {
  const size_t L = ids.views.size();
  if (size_t(py::len(score_lists)) != L)
    throw py::value_error("fuse_scores: " + std::to_string(L) + " id lists but " +
                          std::to_string(py::len(score_lists)) + " score lists");
  std::vector<fu::ScoredList> views(L);
  keep.reserve(L);
  for (size_t l = 0; l < L; ++l) {
    auto s = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(score_lists[l]);
    if (!s || s.ndim() != 1 || size_t(s.shape(0)) != ids.views[l].size)
      throw py::value_error("score list " + std::to_string(l) + " must be 1-d with one score per id (" +
                            std::to_string(ids.views[l].size) + ")");
    keep.push_back(s);
    views[l] = {ids.views[l].ids, keep.back().data(), ids.views[l].size};
  }
  return views;
}

}  // namespace

void bind_fusion(py::module_& m) {
  m.def(
      "_mmr",
      [](py::array candidates, size_t k, py::handle lambda, py::object query, py::object relevance,
         const std::string& metric, py::object scales) {
        const Metric met = parse_metric(metric, "metric");
        const float lam = float(real_arg(lambda, "lambda_", 0.0, 1.0));
        fu::MmrProblem p = mmr_problem(candidates, query, relevance, scales, lam, "");
        fu::MmrResult r;
        {
          py::gil_scoped_release release;
          r = fu::mmr_solve(p, k, met);
        }
        return to_numpy(r.order, r.scores);
      },
      py::arg("candidates"), py::arg("k"), py::arg("lambda_"), py::arg("query") = py::none(),
      py::arg("relevance") = py::none(), py::arg("metric") = "ip", py::arg("scales") = py::none(),
      "MMR over float32 or int8 candidate rows; returns (positions int64, MMR scores float32).");

  m.def(
      "_mmr_batch",
      [](py::list candidates, size_t k, py::handle lambdas, py::object queries, py::object relevances,
         const std::string& metric, py::object scales, size_t threads) {
        const Metric met = parse_metric(metric, "metric");
        const std::vector<fu::MmrProblem> problems = mmr_problems(candidates, lambdas, queries, relevances, scales);
        // threads = 0: every core; larger counts are capped by the pool.
        const auto t = static_cast<long long>(std::min<size_t>(threads, std::numeric_limits<int>::max()));
        std::vector<fu::MmrResult> results;
        {
          py::gil_scoped_release release;
          results = fu::mmr_batch(problems, k, met, t);
        }
        py::list out;
        for (const auto& r : results) out.append(to_numpy(r.order, r.scores));
        return out;
      },
      py::arg("candidates"), py::arg("k"), py::arg("lambdas"), py::arg("queries") = py::none(),
      py::arg("relevances") = py::none(), py::arg("metric") = "ip", py::arg("scales") = py::none(),
      py::arg("threads") = 0, "Many independent MMR problems on a thread pool (GIL released).");

  m.def(
      "_rrf",
      [](py::sequence lists, py::handle k_arg, py::object weights, size_t top_n) {
        const double k = rrf_k_arg(k_arg);
        IdLists in(lists);
        std::vector<double> w = read_weights(weights, in.views.size());
        fu::Fused f;
        {
          py::gil_scoped_release release;
          f = fu::rrf(in.views, k, w.empty() ? nullptr : w.data(), top_n);
        }
        return to_numpy(f.ids, f.scores);
      },
      py::arg("lists"), py::arg("k") = 60.0, py::arg("weights") = py::none(), py::arg("top_n") = 0);

  m.def(
      "_fuse_scores",
      [](py::sequence id_lists, py::sequence score_lists, const std::string& method, py::object weights,
         size_t top_n) {
        const fu::ScoreNorm norm = score_norm(method);
        IdLists ids(id_lists);
        std::vector<py::array_t<float>> keep;
        const std::vector<fu::ScoredList> views = scored_lists(ids, score_lists, keep);
        std::vector<double> w = read_weights(weights, views.size());
        fu::Fused f;
        {
          py::gil_scoped_release release;
          f = fu::fuse_scores(views, norm, w.empty() ? nullptr : w.data(), top_n);
        }
        return to_numpy(f.ids, f.scores);
      },
      py::arg("id_lists"), py::arg("score_lists"), py::arg("method") = "minmax", py::arg("weights") = py::none(),
      py::arg("top_n") = 0);
}

}  // namespace medretrieve::bindings
