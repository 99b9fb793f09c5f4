// Python bindings of the optional CUDA back end (csrc/cuda/host.h for the
// fused operators, csrc/cuda/cuda_api.h for exact search and the device
// table): convert types, check arguments, release the GIL. Built whether or
// not CUDA is: without it _cuda_available() reports (False, why) and every
// other entry point raises RuntimeError("CUDA is not available: ...").
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/convert.h"
#include "common/metric.h"
#include "cuda/cuda_api.h"
#include "cuda/host.h"
#include "fusion/mmr_batch.h"
#include "fusion/rrf.h"

namespace py = pybind11;
namespace fu = medretrieve::fusion;

namespace medretrieve::bindings {

namespace {

py::list kernel_times(const cuda::Timing& t) {
  py::list out;
  for (float v : t.times_ms) out.append(v);
  return out;
}

#if defined(MEDRETRIEVE_WITH_CUDA)

// A top-k bound of the exact kernels, checked before the (nq, k) outputs are allocated.
void check_topk(size_t k) {
  if (k == 0 || k > cuda::kMaxTopK) throw py::value_error("k must be in [1, " + std::to_string(cuda::kMaxTopK) + "]");
}

// The optional row filter of the exact searches: a 1-d C-contiguous uint64
// bitset over rows (bit row % 64 of word row / 64), read in place; None: null.
const cuda::RowFilter* row_filter(const py::object& allowed, cuda::RowFilter& out) {
  if (allowed.is_none()) return nullptr;
  if (!py::isinstance<py::array>(allowed)) throw py::type_error("allowed must be a uint64 numpy bitset over rows");
  const auto arr = py::reinterpret_borrow<py::array>(allowed);
  if (!has_dtype<uint64_t>(arr) || arr.ndim() != 1)
    throw py::type_error("allowed must be a 1-d uint64 bitset over rows");
  require_c_contiguous(arr, "allowed");
  out = {static_cast<const uint64_t*>(arr.data()), size_t(arr.shape(0))};
  return &out;
}

py::tuple exact_search(py::array queries, py::array database, size_t k, const std::string& metric,
                       py::object qscale, py::object dbscale, int warmup, int repeats, py::object allowed) {
  cuda::require_usable();
  cuda::RowFilter filter_words;
  const cuda::RowFilter* filter = row_filter(allowed, filter_words);
  const Metric met = parse_metric(metric, "metric");
  if (queries.ndim() != 2 || database.ndim() != 2) throw py::value_error("queries and database must be 2-d");
  require_c_contiguous(queries, "queries");
  require_c_contiguous(database, "database");
  const size_t nq = size_t(queries.shape(0)), n = size_t(database.shape(0)), dim = size_t(database.shape(1));
  if (size_t(queries.shape(1)) != dim)
    throw py::value_error("queries have dim " + std::to_string(queries.shape(1)) + ", database " + std::to_string(dim));
  check_topk(k);
  py::array_t<int64_t> ids({nq, k});
  py::array_t<float> scores({nq, k});
  int64_t* oi = ids.mutable_data();
  float* os = scores.mutable_data();
  cuda::Timing timing{warmup, repeats, {}};
  if (has_dtype<float>(queries) && has_dtype<float>(database)) {
    const float* q = static_cast<const float*>(queries.data());
    const float* d = static_cast<const float*>(database.data());
    py::gil_scoped_release release;
    cuda::exact_search_f32(q, nq, d, n, dim, k, met, oi, os, &timing, filter);
  } else if (has_dtype<int8_t>(queries) && has_dtype<int8_t>(database)) {
    const float* qs = qscale.is_none() ? nullptr : vector_of<float>(qscale, nq, "query scales");
    const float* ds = dbscale.is_none() ? nullptr : vector_of<float>(dbscale, n, "database scales");
    const int8_t* q = static_cast<const int8_t*>(queries.data());
    const int8_t* d = static_cast<const int8_t*>(database.data());
    py::gil_scoped_release release;
    cuda::exact_search_i8(q, qs, nq, d, ds, n, dim, k, met, oi, os, &timing, filter);
  } else {
    throw py::type_error("queries and database must both be float32 or both be int8");
  }
  return py::make_tuple(ids, scores, kernel_times(timing));
}

// Device-resident rows for FlatIndex(device="cuda"); search returns row positions.
void bind_table(py::module_& m) {
  py::class_<cuda::DeviceTable>(m, "_CudaTable")
      .def(py::init([] {
        cuda::require_usable();
        return std::make_unique<cuda::DeviceTable>();
      }))
      .def(
          "assign",
          [](cuda::DeviceTable& self, py::array rows, py::object scales) {
            if (rows.ndim() != 2) throw py::value_error("rows must be 2-d");
            require_c_contiguous(rows, "rows");
            const size_t n = size_t(rows.shape(0)), dim = size_t(rows.shape(1));
            if (has_dtype<float>(rows)) {
              const float* p = static_cast<const float*>(rows.data());
              py::gil_scoped_release release;
              self.assign_f32(p, n, dim);
            } else if (has_dtype<int8_t>(rows)) {
              const float* s = scales.is_none() ? nullptr : vector_of<float>(scales, n, "scales");
              const int8_t* p = static_cast<const int8_t*>(rows.data());
              py::gil_scoped_release release;
              self.assign_i8(p, s, n, dim);
            } else {
              throw py::type_error("rows must be float32 or int8");
            }
          },
          py::arg("rows"), py::arg("scales") = py::none())
      .def(
          "search",
          [](const cuda::DeviceTable& self, py::array queries, py::object qscales, size_t k, const std::string& metric,
             py::object allowed) {
            const Metric met = parse_metric(metric, "metric");
            cuda::RowFilter filter_words;
            const cuda::RowFilter* filter = row_filter(allowed, filter_words);
            if (queries.ndim() != 2 || size_t(queries.shape(1)) != self.dim())
              throw py::value_error("queries must be 2-d with dim " + std::to_string(self.dim()));
            require_c_contiguous(queries, "queries");
            check_topk(k);
            const size_t nq = size_t(queries.shape(0));
            py::array_t<int64_t> ids({nq, k});
            py::array_t<float> scores({nq, k});
            int64_t* oi = ids.mutable_data();
            float* os = scores.mutable_data();
            if (self.is_int8() && has_dtype<int8_t>(queries)) {
              const float* qs = qscales.is_none() ? nullptr : vector_of<float>(qscales, nq, "query scales");
              const int8_t* q = static_cast<const int8_t*>(queries.data());
              py::gil_scoped_release release;
              self.search_i8(q, qs, nq, k, met, oi, os, nullptr, filter);
            } else if (!self.is_int8() && has_dtype<float>(queries)) {
              const float* q = static_cast<const float*>(queries.data());
              py::gil_scoped_release release;
              self.search_f32(q, nq, k, met, oi, os, nullptr, filter);
            } else {
              throw py::type_error("queries must have the table's dtype");
            }
            return py::make_tuple(ids, scores);
          },
          py::arg("queries"), py::arg("query_scales"), py::arg("k"), py::arg("metric"),
          py::arg("allowed") = py::none())
      .def_property_readonly("rows", &cuda::DeviceTable::rows)
      .def_property_readonly("device_bytes", &cuda::DeviceTable::device_bytes);
}

#else  // without the back end: the same name, raising once the caller asks for it

py::tuple exact_search(py::object, py::object, size_t, const std::string&, py::object, py::object, int, int,
                       py::object) {
  cuda::require_usable();
  return py::tuple();  // not reached: require_usable() threw
}

#endif  // MEDRETRIEVE_WITH_CUDA

py::tuple mmr_batch(py::list candidates, size_t k, py::handle lambdas, py::object queries, py::object relevances,
                    const std::string& metric, py::object scales, int warmup, int repeats) {
  cuda::require_usable();
  const Metric met = parse_metric(metric, "metric");
  const std::vector<fu::MmrProblem> problems = mmr_problems(candidates, lambdas, queries, relevances, scales);
  cuda::Timing timing{warmup, repeats, {}};
  std::vector<fu::MmrResult> results;
  {
    py::gil_scoped_release release;
    results = cuda::mmr_batch(problems, k, met, &timing);
  }
  py::list out;
  for (const auto& r : results) out.append(to_numpy(r.order, r.scores));
  return py::make_tuple(out, kernel_times(timing));
}

py::tuple rrf(py::sequence lists, py::handle k_arg, py::object weights, size_t top_n, int warmup, int repeats) {
  cuda::require_usable();
  const double k = rrf_k_arg(k_arg);
  IdLists in(lists);
  const std::vector<double> w = read_weights(weights, in.views.size());
  cuda::Timing timing{warmup, repeats, {}};
  fu::Fused f;
  {
    py::gil_scoped_release release;
    f = cuda::rrf_lists(in.views, k, w.empty() ? nullptr : w.data(), top_n, &timing);
  }
  py::tuple res = to_numpy(f.ids, f.scores);
  return py::make_tuple(res[0], res[1], kernel_times(timing));
}

}  // namespace

void bind_cuda(py::module_& m) {
  m.def(
      "_cuda_available",
      [] {
        std::string why;
        const bool ok = cuda::usable(&why);
        return py::make_tuple(ok, why);
      },
      "(usable, reason): whether the CUDA kernels can run here and, if not, why.");
  m.def("_cuda_device_summary", &cuda::usable_device_summary);
#if defined(MEDRETRIEVE_WITH_CUDA)
  bind_table(m);
#endif
  m.def("_cuda_exact_search", &exact_search, py::arg("queries"), py::arg("database"), py::arg("k"),
        py::arg("metric") = "ip", py::arg("query_scales") = py::none(), py::arg("database_scales") = py::none(),
        py::arg("warmup") = 0, py::arg("repeats") = 0, py::arg("allowed") = py::none(),
        "Exact top-k on the GPU: (ids, scores, kernel times in ms); allowed: uint64 bitset over database rows.");
  // The exact searches take allowed= (a row bitset read on the device).
  m.attr("CUDA_ROW_FILTER") = true;
  m.def("_cuda_mmr_batch", &mmr_batch, py::arg("candidates"), py::arg("k"), py::arg("lambdas"),
        py::arg("queries") = py::none(), py::arg("relevances") = py::none(), py::arg("metric") = "ip",
        py::arg("scales") = py::none(), py::arg("warmup") = 0, py::arg("repeats") = 0,
        "Batched MMR on the GPU: (results, kernel times in ms).");
  m.def("_cuda_rrf", &rrf, py::arg("lists"), py::arg("k") = 60.0, py::arg("weights") = py::none(),
        py::arg("top_n") = 0, py::arg("warmup") = 0, py::arg("repeats") = 0,
        "RRF on the GPU: (ids, scores, kernel times in ms).");
}

}  // namespace medretrieve::bindings
