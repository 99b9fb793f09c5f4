// Index.search_mmr: one native call from query to diversified hits.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "bindings/args.h"
#include "bindings/bindings.h"
#include "fusion/search_mmr.h"

namespace py = pybind11;
namespace mi = medretrieve::index;

namespace medretrieve::bindings {

void bind_search_mmr(py::module_& m) {
  m.def(
      "search_mmr",
      [](const mi::Hnsw& index, py::handle query, py::handle k_arg, py::handle fetch_k_arg, py::handle lambda_arg,
         py::handle ef_arg, py::handle labels, py::handle allowed_v) {
        const size_t dim = index.params().dim;
        const Rows q = rows_arg(query, dim, "query");
        if (q.n != 1) throw InputError("search_mmr takes one query, got " + std::to_string(q.n) + " rows");
        mi::check_components(q.data, 1, dim, "query");
        const size_t k = count_arg(k_arg, "k"), fetch_k = count_arg(fetch_k_arg, "fetch_k");
        const float lambda = float(real_arg(lambda_arg, "lambda_", 0.0, 1.0));
        const size_t ef = ef_arg.is_none() ? 0 : count_arg(ef_arg, "ef");
        std::optional<mi::LabelQuery> lq;
        if (auto values = query_labels_arg(labels)) lq = mi::LabelQuery::make(*values);
        const std::optional<AllowedBits> allowed = allowed_arg(allowed_v);  // held (read in place) until the end
        const mi::ExternalBits bits = allowed ? mi::ExternalBits{allowed->words, allowed->n_words} : mi::ExternalBits{};
        fusion::SearchMmrResult r;
        {
          py::gil_scoped_release nogil;
          r = fusion::search_mmr(index, q.data, k, fetch_k, lambda, ef, lq ? &*lq : nullptr, allowed ? &bits : nullptr);
        }
        py::array_t<int64_t> ids(r.ids.size());
        py::array_t<float> scores(r.scores.size()), rel(r.relevance.size());
        std::copy(r.ids.begin(), r.ids.end(), ids.mutable_data());
        std::copy(r.scores.begin(), r.scores.end(), scores.mutable_data());
        std::copy(r.relevance.begin(), r.relevance.end(), rel.mutable_data());
        return py::make_tuple(ids, scores, rel);
      },
      py::arg("index"), py::arg("query"), py::arg("k"), py::arg("fetch_k"), py::arg("lambda_"),
      py::arg("ef") = py::none(), py::arg("labels") = py::none(), py::arg("allowed") = py::none(),
      "Search fetch_k candidates and diversify them with MMR, reading vectors from the index storage. "
      "allowed: None or a packed uint64 bitset over external ids (args.h, allowed_arg), the row filter of "
      "HnswIndex.search. Returns (ids int64, mmr_scores float32, relevance float32) in pick order.");
}

}  // namespace medretrieve::bindings
