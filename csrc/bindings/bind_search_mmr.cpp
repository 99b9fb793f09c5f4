// Index.search_mmr: one native call from query to diversified hits.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "fusion/search_mmr.h"

namespace py = pybind11;
namespace mi = medretrieve::index;

namespace medretrieve::bindings {

void bind_search_mmr(py::module_& m) {
  m.def(
      "search_mmr",
      [](const mi::Hnsw& index, py::array_t<float, py::array::c_style | py::array::forcecast> query, long long k,
         long long fetch_k, double lambda, std::optional<long long> ef,
         std::optional<std::vector<uint32_t>> labels) {
        const size_t dim = index.params().dim;
        if (query.ndim() != 1 || size_t(query.shape(0)) != dim)
          throw py::value_error("query must be one vector of dimension " + std::to_string(dim));
        mi::check_components(query.data(), 1, dim, "query");
        if (k < 0) throw py::value_error("k must be >= 0, got " + std::to_string(k));
        if (fetch_k < 0) throw py::value_error("fetch_k must be >= 0, got " + std::to_string(fetch_k));
        if (ef && *ef < 0) throw py::value_error("ef must be >= 0");
        if (!(lambda >= 0.0 && lambda <= 1.0)) throw py::value_error("lambda_ must be in [0, 1]");
        std::optional<mi::LabelQuery> lq;
        if (labels) lq = mi::LabelQuery::make(*labels);
        fusion::SearchMmrResult r;
        {
          py::gil_scoped_release nogil;
          r = fusion::search_mmr(index, query.data(), size_t(k), size_t(fetch_k), float(lambda),
                                 ef ? size_t(*ef) : 0, lq ? &*lq : nullptr);
        }
        py::array_t<int64_t> ids(r.ids.size());
        py::array_t<float> scores(r.scores.size()), rel(r.relevance.size());
        std::copy(r.ids.begin(), r.ids.end(), ids.mutable_data());
        std::copy(r.scores.begin(), r.scores.end(), scores.mutable_data());
        std::copy(r.relevance.begin(), r.relevance.end(), rel.mutable_data());
        return py::make_tuple(ids, scores, rel);
      },
      py::arg("index"), py::arg("query"), py::arg("k"), py::arg("fetch_k"), py::arg("lambda_"),
      py::arg("ef") = py::none(), py::arg("labels") = py::none(),
      "Search fetch_k candidates and diversify them with MMR, reading vectors from the index storage. "
      "Returns (ids int64, mmr_scores float32, relevance float32) in pick order.");
}

}  // namespace medretrieve::bindings
