// Python bindings of the fusion operators (MMR, RRF, score fusion) and of the
// optional CUDA back end. Converts types, checks arguments, releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bindings/bindings.h"
#include "cuda/cuda_api.h"
#include "fusion/mmr.h"
#include "fusion/rrf.h"
#include "kernels/distances.h"

namespace py = pybind11;
namespace fu = medretrieve::fusion;

namespace medretrieve::bindings {
namespace {

template <typename T>
bool has_dtype(const py::array& a) {
  return a.dtype().is(py::dtype::of<T>());
}

void require_c_contiguous(const py::array& a, const char* name) {
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
}

template <typename T>
const T* vector_of(const py::handle& h, size_t n, const char* name) {
  py::array a = py::reinterpret_borrow<py::array>(h);
  if (!has_dtype<T>(a)) throw py::type_error(std::string(name) + " has the wrong dtype");
  require_c_contiguous(a, name);
  if (a.ndim() != 1 || size_t(a.shape(0)) != n)
    throw py::value_error(std::string(name) + " must be 1-d with " + std::to_string(n) + " entries");
  return static_cast<const T*>(a.data());
}

const float* finite(const float* v, size_t n, const char* name) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) throw py::value_error(std::string(name) + " contains NaN or inf");
  return v;
}

fu::Similarity similarity_named(const std::string& metric) {
  if (metric == "ip") return fu::Similarity::InnerProduct;
  if (metric == "l2") return fu::Similarity::NegL2;
  if (metric == "cosine") return fu::Similarity::Cosine;
  throw py::value_error("metric must be 'ip', 'cosine' or 'l2', got '" + metric + "'");
}

// One MMR problem, with every Python object resolved to raw pointers while
// the GIL is held, so `solve` can run without it.
struct MmrProblem {
  bool int8 = false;
  const float* f32 = nullptr;
  const int8_t* i8 = nullptr;
  size_t n = 0, dim = 0, k = 0;
  float lambda = 0.5f;
  fu::Similarity sim = fu::Similarity::InnerProduct;
  const float* scales = nullptr;     // int8 only; null = 1
  const float* query = nullptr;      // float32 [dim] or null
  const float* relevance = nullptr;  // float32 [n] or null (then query is set)
  fu::MmrResult result;

  void prepare(const py::handle& candidates, const py::handle& query_obj, const py::handle& relevance_obj,
               const py::handle& scales_obj) {
    py::array c = py::reinterpret_borrow<py::array>(candidates);
    if (c.ndim() != 2) throw py::value_error("candidates must be a 2-d array (n, dim)");
    require_c_contiguous(c, "candidates");
    n = size_t(c.shape(0));
    dim = size_t(c.shape(1));
    if (has_dtype<float>(c)) {
      f32 = static_cast<const float*>(c.data());
    } else if (has_dtype<int8_t>(c)) {
      int8 = true;
      i8 = static_cast<const int8_t*>(c.data());
      if (dim > kernels::kMaxInt8Dim) throw py::value_error("int8 vectors longer than 131072 are not supported");
      if (!scales_obj.is_none()) {
        scales = finite(vector_of<float>(scales_obj, n, "scales"), n, "scales");
        for (size_t i = 0; i < n; ++i)
          if (scales[i] < 0.f) throw py::value_error("scales must be >= 0");
      }
    } else {
      throw py::type_error("candidates must be float32 or int8");
    }
    if (!query_obj.is_none()) query = finite(vector_of<float>(query_obj, dim, "query"), dim, "query");
    if (!relevance_obj.is_none())
      relevance = finite(vector_of<float>(relevance_obj, n, "relevance"), n, "relevance");
    if (!query && !relevance) throw py::value_error("give a query or a relevance vector");
  }

  // Relevance from the query when none was given (runs without the GIL).
  const float* relevance_or_compute(std::vector<float>& buf) const {
    if (relevance) return relevance;
    buf.resize(n);
    if (int8) {
      std::vector<const int8_t*> rows = i8_rows();
      fu::relevance_i8(query, rows.data(), scales, n, dim, sim, buf.data());
    } else {
      std::vector<const float*> rows = f32_rows();
      fu::relevance_f32(query, rows.data(), n, dim, sim, buf.data());
    }
    return buf.data();
  }

  std::vector<const int8_t*> i8_rows() const {
    std::vector<const int8_t*> rows(n);
    for (size_t i = 0; i < n; ++i) rows[i] = i8 + i * dim;
    return rows;
  }
  std::vector<const float*> f32_rows() const {
    std::vector<const float*> rows(n);
    for (size_t i = 0; i < n; ++i) rows[i] = f32 + i * dim;
    return rows;
  }

  // The metric in the int8 pair-similarity form of mmr_select_i8 (base 0):
  // ip: s_i s_j c_i.c_j; l2: -s_i^2|c_i|^2 - s_j^2|c_j|^2 + 2 s_i s_j c_i.c_j;
  // cosine: c_i.c_j / (|c_i| |c_j|). offset stays empty when it is all 0.
  float i8_pair_form(std::vector<float>& scale, std::vector<float>& offset) const {
    scale.assign(n, 1.f);
    offset.clear();
    if (scales) std::copy(scales, scales + n, scale.begin());
    const auto& kt = kernels::active();
    float weight = 1.f;
    if (sim == fu::Similarity::NegL2) {
      offset.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const int8_t* r = i8 + i * dim;
        offset[i] = -scale[i] * scale[i] * float(kt.dot_i8(r, r, dim));
      }
      weight = 2.f;
    } else if (sim == fu::Similarity::Cosine) {
      for (size_t i = 0; i < n; ++i) {
        const int8_t* r = i8 + i * dim;
        const float nn = float(kt.dot_i8(r, r, dim));
        scale[i] = (nn > 0.f && scale[i] > 0.f) ? 1.f / std::sqrt(nn) : 0.f;
      }
    }
    return weight;
  }

  // Runs without the GIL.
  void solve() {
    std::vector<float> rel_buf;
    const float* rel = relevance_or_compute(rel_buf);
    if (int8) {
      std::vector<const int8_t*> rows = i8_rows();
      std::vector<float> scale, offset;
      const float weight = i8_pair_form(scale, offset);
      result = fu::mmr_select_i8(rows.data(), scale.data(), offset.empty() ? nullptr : offset.data(), 0.f, weight, n,
                                 dim, rel, k, lambda);
    } else {
      std::vector<const float*> rows = f32_rows();
      result = fu::mmr_select_f32(rows.data(), n, dim, rel, k, lambda, sim);
    }
  }
};

// One MmrProblem per query of a batch call (CPU or CUDA): per-query candidates, query, relevance and scales.
std::vector<MmrProblem> mmr_problems(const py::list& candidates, size_t k,
                                     const py::array_t<float, py::array::c_style | py::array::forcecast>& lambdas,
                                     const py::object& queries, const py::object& relevances,
                                     const std::string& metric, const py::object& scales) {
  const size_t B = py::len(candidates);
  if (lambdas.ndim() != 1 || size_t(lambdas.shape(0)) != B)
    throw py::value_error("lambdas must have one entry per query");
  auto item = [](const py::object& seq, size_t i) -> py::object {
    return seq.is_none() ? py::object(py::none()) : py::object(seq[py::int_(i)]);
  };
  std::vector<MmrProblem> problems(B);
  for (size_t b = 0; b < B; ++b) {
    problems[b].sim = similarity_named(metric);
    problems[b].k = k;
    problems[b].lambda = lambdas.data()[b];
    problems[b].prepare(candidates[b], item(queries, b), item(relevances, b), item(scales, b));
  }
  return problems;
}

py::tuple to_numpy(const std::vector<int64_t>& ids, const std::vector<float>& scores) {
  py::array_t<int64_t> a(ids.size());
  py::array_t<float> b(scores.size());
  std::copy(ids.begin(), ids.end(), a.mutable_data());
  std::copy(scores.begin(), scores.end(), b.mutable_data());
  return py::make_tuple(a, b);
}

// Runs fn(i) for i in [0, count) on up to `threads` threads (0 = all cores);
// the first exception is rethrown after every thread has joined.
template <class Fn>
void parallel_for(size_t count, size_t threads, Fn&& fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, count);
  if (threads <= 1) {
    for (size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < count;) {
      try {
        fn(i);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Reads one ranked list: a NumPy integer array (no copy when it is already
// C-contiguous int64) or any Python sequence of ints (read item by item).
void read_id_list(const py::handle& obj, size_t l, std::vector<py::array_t<int64_t>>& keep,
                  std::vector<std::vector<int64_t>>& owned, fu::IdList& out) {
  if (py::isinstance<py::array>(obj)) {
    py::array a = py::reinterpret_borrow<py::array>(obj);
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
      throw py::type_error("ranked list " + std::to_string(l) + " must hold integer ids, got dtype " +
                           std::string(py::str(a.dtype())));
    if (a.ndim() != 1) throw py::value_error("ranked list " + std::to_string(l) + " must be 1-d");
    keep.push_back(py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a));
    out = {keep.back().data(), size_t(keep.back().shape(0))};
    return;
  }
  if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) || !py::isinstance<py::sequence>(obj))
    throw py::type_error("ranked list " + std::to_string(l) + " must be a sequence of integer ids");
  // PySequence_Fast: lists and tuples are read in place, item by item.
  py::object fast = py::reinterpret_steal<py::object>(PySequence_Fast(obj.ptr(), "ranked list is not a sequence"));
  if (!fast) throw py::error_already_set();
  const size_t n = size_t(PySequence_Fast_GET_SIZE(fast.ptr()));
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<int64_t>& v = owned[l];
  v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* o = items[i];
    py::object as_int;  // NumPy integer scalars and other __index__ types
    if (!PyLong_Check(o)) {
      if (PyFloat_Check(o) || !PyIndex_Check(o))
        throw py::type_error("ranked list " + std::to_string(l) + " item " + std::to_string(i) +
                             " is not an int (map string ids to ints first)");
      as_int = py::reinterpret_steal<py::object>(PyNumber_Index(o));
      if (!as_int) throw py::error_already_set();
      o = as_int.ptr();
    }
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) throw py::value_error("id in ranked list " + std::to_string(l) + " does not fit in int64");
    v[i] = int64_t(x);
  }
  out = {v.data(), v.size()};
}

// Every ranked list of an RRF call, read once: views point into NumPy arrays
// (kept alive here) or into copies of Python sequences.
struct RrfLists {
  std::vector<py::array_t<int64_t>> keep;
  std::vector<std::vector<int64_t>> owned;
  std::vector<fu::IdList> views;
  explicit RrfLists(const py::sequence& lists) : owned(py::len(lists)), views(py::len(lists)) {
    keep.reserve(views.size());
    for (size_t l = 0; l < views.size(); ++l) read_id_list(lists[l], l, keep, owned, views[l]);
  }
};

std::vector<double> read_weights(const py::handle& weights, size_t n_lists) {
  std::vector<double> w;
  if (weights.is_none()) return w;
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(weights);
  if (!a || a.ndim() != 1) throw py::value_error("weights must be a 1-d sequence of numbers");
  if (size_t(a.shape(0)) != n_lists)
    throw py::value_error("weights has " + std::to_string(a.shape(0)) + " entries for " + std::to_string(n_lists) +
                          " lists");
  w.assign(a.data(), a.data() + n_lists);
  return w;
}

// --- CUDA back end -------------------------------------------------------

bool cuda_ok(std::string* why) {
#if defined(MEDRETRIEVE_WITH_CUDA)
  return cuda::available(why);
#else
  if (why) *why = "medretrieve was built without the CUDA back end (MEDRETRIEVE_CUDA=OFF or nvcc not found)";
  return false;
#endif
}

void require_cuda() {
  std::string why;
  if (!cuda_ok(&why)) throw std::runtime_error("CUDA is not available: " + why);
}

[[maybe_unused]] py::list times_of(const cuda::Timing& t) {
  py::list out;
  for (float v : t.times_ms) out.append(v);
  return out;
}

#if defined(MEDRETRIEVE_WITH_CUDA)
cuda::Metric cuda_metric(const std::string& metric) {
  if (metric == "ip") return cuda::Metric::InnerProduct;
  if (metric == "l2") return cuda::Metric::NegL2;
  throw py::value_error("cuda exact search metric must be 'ip' or 'l2', got '" + metric + "'");
}
#endif

void bind_cuda(py::module_& m) {
  m.def("_cuda_available", [] {
    std::string why;
    bool ok = cuda_ok(&why);
    return py::make_tuple(ok, why);
  }, "(usable, reason): whether the CUDA kernels can run here and, if not, why.");

  m.def("_cuda_device_summary", []() -> std::string {
    require_cuda();
#if defined(MEDRETRIEVE_WITH_CUDA)
    return cuda::device_summary();
#else
    return {};
#endif
  });

  m.def(
      "_cuda_exact_search",
      [](py::array queries, py::array database, size_t k, const std::string& metric, py::object qscale,
         py::object dbscale, int warmup, int repeats) -> py::tuple {
        require_cuda();
#if defined(MEDRETRIEVE_WITH_CUDA)
        const cuda::Metric met = cuda_metric(metric);
        if (queries.ndim() != 2 || database.ndim() != 2) throw py::value_error("queries and database must be 2-d");
        require_c_contiguous(queries, "queries");
        require_c_contiguous(database, "database");
        const size_t nq = size_t(queries.shape(0)), n = size_t(database.shape(0)), dim = size_t(database.shape(1));
        if (size_t(queries.shape(1)) != dim)
          throw py::value_error("queries have dim " + std::to_string(queries.shape(1)) + ", database " +
                                std::to_string(dim));
        if (k == 0 || k > cuda::kMaxTopK)
          throw py::value_error("k must be in [1, " + std::to_string(cuda::kMaxTopK) + "]");
        py::array_t<int64_t> ids({nq, k});
        py::array_t<float> scores({nq, k});
        cuda::Timing timing{warmup, repeats, {}};
        if (has_dtype<float>(queries) && has_dtype<float>(database)) {
          const float* q = static_cast<const float*>(queries.data());
          const float* d = static_cast<const float*>(database.data());
          int64_t* oi = ids.mutable_data();
          float* os = scores.mutable_data();
          py::gil_scoped_release release;
          cuda::exact_search_f32(q, nq, d, n, dim, k, met, oi, os, &timing);
        } else if (has_dtype<int8_t>(queries) && has_dtype<int8_t>(database)) {
          const float* qs = qscale.is_none() ? nullptr : vector_of<float>(qscale, nq, "query scales");
          const float* ds = dbscale.is_none() ? nullptr : vector_of<float>(dbscale, n, "database scales");
          const int8_t* q = static_cast<const int8_t*>(queries.data());
          const int8_t* d = static_cast<const int8_t*>(database.data());
          int64_t* oi = ids.mutable_data();
          float* os = scores.mutable_data();
          py::gil_scoped_release release;
          cuda::exact_search_i8(q, qs, nq, d, ds, n, dim, k, met, oi, os, &timing);
        } else {
          throw py::type_error("queries and database must both be float32 or both be int8");
        }
        return py::make_tuple(ids, scores, times_of(timing));
#else
        return py::tuple();
#endif
      },
      py::arg("queries"), py::arg("database"), py::arg("k"), py::arg("metric") = "ip",
      py::arg("query_scales") = py::none(), py::arg("database_scales") = py::none(), py::arg("warmup") = 0,
      py::arg("repeats") = 0);

  m.def(
      "_cuda_mmr_batch",
      [](py::list candidates, size_t k, py::array_t<float, py::array::c_style | py::array::forcecast> lambdas,
         py::object queries, py::object relevances, const std::string& metric, py::object scales, int warmup,
         int repeats) -> py::tuple {
        require_cuda();
#if defined(MEDRETRIEVE_WITH_CUDA)
        std::vector<MmrProblem> problems = mmr_problems(candidates, k, lambdas, queries, relevances, metric, scales);
        const size_t B = problems.size();
        for (const auto& p : problems)
          if (p.int8 != problems[0].int8 || p.dim != problems[0].dim)
            throw py::value_error("cuda MMR batch: every candidate matrix must share dtype and dim");
        // k > n selects n: size the device outputs by the largest problem.
        size_t max_n = 0;
        for (const auto& p : problems) max_n = std::max(max_n, p.n);
        k = std::min(k, max_n);
        std::vector<int64_t> order(B * k, -1);
        std::vector<float> mmr_scores(B * k);
        cuda::Timing timing{warmup, repeats, {}};
        if (B > 0 && k > 0) {
          py::gil_scoped_release release;
          const size_t dim = problems[0].dim;
          std::vector<int64_t> offsets(B + 1, 0);
          for (size_t b = 0; b < B; ++b) offsets[b + 1] = offsets[b] + int64_t(problems[b].n);
          const size_t total = size_t(offsets[B]);
          std::vector<float> rel(total), lam(B);
          for (size_t b = 0; b < B; ++b) {
            std::vector<float> buf;
            const float* r = problems[b].relevance_or_compute(buf);
            std::copy(r, r + problems[b].n, rel.begin() + offsets[b]);
            lam[b] = problems[b].lambda;
          }
          if (problems[0].int8) {
            std::vector<int8_t> rows(total * dim);
            std::vector<float> scale(total), offset(total, 0.f);
            float weight = 1.f;
            for (size_t b = 0; b < B; ++b) {
              const MmrProblem& p = problems[b];
              std::copy(p.i8, p.i8 + p.n * dim, rows.begin() + offsets[b] * dim);
              std::vector<float> s, o;
              weight = p.i8_pair_form(s, o);
              std::copy(s.begin(), s.end(), scale.begin() + offsets[b]);
              if (!o.empty()) std::copy(o.begin(), o.end(), offset.begin() + offsets[b]);
            }
            cuda::mmr_i8(rows.data(), scale.data(), offset.data(), 0.f, weight, offsets.data(), B, dim, rel.data(),
                         lam.data(), k, order.data(), mmr_scores.data(), &timing);
          } else {
            std::vector<float> rows(total * dim);
            for (size_t b = 0; b < B; ++b)
              std::copy(problems[b].f32, problems[b].f32 + problems[b].n * dim, rows.begin() + offsets[b] * dim);
            cuda::mmr_f32(rows.data(), offsets.data(), B, dim, rel.data(), lam.data(), k, int(problems[0].sim),
                          order.data(), mmr_scores.data(), &timing);
          }
        }
        py::list out;
        for (size_t b = 0; b < B; ++b) {
          const size_t kb = std::min(k, problems[b].n);
          std::vector<int64_t> o(order.begin() + b * k, order.begin() + b * k + kb);
          std::vector<float> sc(mmr_scores.begin() + b * k, mmr_scores.begin() + b * k + kb);
          out.append(to_numpy(o, sc));
        }
        return py::make_tuple(out, times_of(timing));
#else
        return py::tuple();
#endif
      },
      py::arg("candidates"), py::arg("k"), py::arg("lambdas"), py::arg("queries") = py::none(),
      py::arg("relevances") = py::none(), py::arg("metric") = "ip", py::arg("scales") = py::none(),
      py::arg("warmup") = 0, py::arg("repeats") = 0);

  m.def(
      "_cuda_rrf",
      [](py::sequence lists, double k, py::object weights, size_t top_n, int warmup, int repeats) -> py::tuple {
        require_cuda();
#if defined(MEDRETRIEVE_WITH_CUDA)
        RrfLists in(lists);
        const size_t L = in.views.size();
        std::vector<fu::IdList>& views = in.views;
        std::vector<double> w = read_weights(weights, L);
        if (!std::isfinite(k) || k < 0) throw py::value_error("rrf: k must be finite and >= 0");
        for (size_t l = 0; l < w.size(); ++l)
          if (!std::isfinite(w[l]) || w[l] < 0) throw py::value_error("rrf: weights must be finite and >= 0");
        std::vector<int64_t> out_ids;
        std::vector<float> out_scores;
        cuda::Timing timing{warmup, repeats, {}};
        {
          py::gil_scoped_release release;
          std::vector<int64_t> flat, offsets(L + 1, 0);
          for (size_t l = 0; l < L; ++l) {
            flat.insert(flat.end(), views[l].ids, views[l].ids + views[l].size);
            offsets[l + 1] = int64_t(flat.size());
          }
          cuda::rrf(flat.data(), offsets.data(), L, k, w.empty() ? nullptr : w.data(), top_n, out_ids, out_scores,
                    &timing);
        }
        py::tuple res = to_numpy(out_ids, out_scores);
        return py::make_tuple(res[0], res[1], times_of(timing));
#else
        return py::tuple();
#endif
      },
      py::arg("lists"), py::arg("k") = 60.0, py::arg("weights") = py::none(), py::arg("top_n") = 0,
      py::arg("warmup") = 0, py::arg("repeats") = 0);

#if defined(MEDRETRIEVE_WITH_CUDA)
  // Device-resident rows for FlatIndex(device="cuda"); search returns row positions.
  py::class_<cuda::DeviceTable>(m, "_CudaTable")
      .def(py::init([] {
        require_cuda();
        return std::make_unique<cuda::DeviceTable>();
      }))
      .def("assign",
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
      .def("search",
           [](const cuda::DeviceTable& self, py::array queries, py::object qscales, size_t k,
              const std::string& metric) {
             const cuda::Metric met = cuda_metric(metric);
             if (queries.ndim() != 2 || size_t(queries.shape(1)) != self.dim())
               throw py::value_error("queries must be 2-d with dim " + std::to_string(self.dim()));
             require_c_contiguous(queries, "queries");
             const size_t nq = size_t(queries.shape(0));
             py::array_t<int64_t> ids({nq, k});
             py::array_t<float> scores({nq, k});
             int64_t* oi = ids.mutable_data();
             float* os = scores.mutable_data();
             if (self.is_int8() && has_dtype<int8_t>(queries)) {
               const float* qs = qscales.is_none() ? nullptr : vector_of<float>(qscales, nq, "query scales");
               const int8_t* q = static_cast<const int8_t*>(queries.data());
               py::gil_scoped_release release;
               self.search_i8(q, qs, nq, k, met, oi, os);
             } else if (!self.is_int8() && has_dtype<float>(queries)) {
               const float* q = static_cast<const float*>(queries.data());
               py::gil_scoped_release release;
               self.search_f32(q, nq, k, met, oi, os);
             } else {
               throw py::type_error("queries must have the table's dtype");
             }
             return py::make_tuple(ids, scores);
           },
           py::arg("queries"), py::arg("query_scales"), py::arg("k"), py::arg("metric"))
      .def_property_readonly("rows", &cuda::DeviceTable::rows)
      .def_property_readonly("device_bytes", &cuda::DeviceTable::device_bytes);
#endif
}

}  // namespace

void bind_fusion(py::module_& m) {
  m.def(
      "_mmr",
      [](py::array candidates, size_t k, float lambda, py::object query, py::object relevance,
         const std::string& metric, py::object scales) {
        MmrProblem p;
        p.sim = similarity_named(metric);
        p.k = k;
        p.lambda = lambda;
        p.prepare(candidates, query, relevance, scales);
        {
          py::gil_scoped_release release;
          p.solve();
        }
        return to_numpy(p.result.order, p.result.scores);
      },
      py::arg("candidates"), py::arg("k"), py::arg("lambda_"), py::arg("query") = py::none(),
      py::arg("relevance") = py::none(), py::arg("metric") = "ip", py::arg("scales") = py::none(),
      "MMR over float32 or int8 candidate rows; returns (positions int64, MMR scores float32).");

  m.def(
      "_mmr_batch",
      [](py::list candidates, size_t k, py::array_t<float, py::array::c_style | py::array::forcecast> lambdas,
         py::object queries, py::object relevances, const std::string& metric, py::object scales, size_t threads) {
        std::vector<MmrProblem> problems = mmr_problems(candidates, k, lambdas, queries, relevances, metric, scales);
        const size_t B = problems.size();
        {
          py::gil_scoped_release release;
          parallel_for(B, threads, [&](size_t b) { problems[b].solve(); });
        }
        py::list out;
        for (auto& p : problems) out.append(to_numpy(p.result.order, p.result.scores));
        return out;
      },
      py::arg("candidates"), py::arg("k"), py::arg("lambdas"), py::arg("queries") = py::none(),
      py::arg("relevances") = py::none(), py::arg("metric") = "ip", py::arg("scales") = py::none(),
      py::arg("threads") = 0, "Many independent MMR problems on a thread pool (GIL released).");

  m.def(
      "_rrf",
      [](py::sequence lists, double k, py::object weights, size_t top_n) {
        RrfLists in(lists);
        const size_t L = in.views.size();
        std::vector<fu::IdList>& views = in.views;
        std::vector<double> w = read_weights(weights, L);
        fu::Fused f;
        {
          py::gil_scoped_release release;
          f = fu::rrf(views, k, w.empty() ? nullptr : w.data(), top_n);
        }
        return to_numpy(f.ids, f.scores);
      },
      py::arg("lists"), py::arg("k") = 60.0, py::arg("weights") = py::none(), py::arg("top_n") = 0);

  m.def(
      "_fuse_scores",
      [](py::sequence id_lists, py::sequence score_lists, const std::string& method, py::object weights,
         size_t top_n) {
        const size_t L = py::len(id_lists);
        if (size_t(py::len(score_lists)) != L)
          throw py::value_error("fuse_scores: " + std::to_string(L) + " id lists but " +
                                std::to_string(py::len(score_lists)) + " score lists");
        fu::ScoreNorm norm;
        if (method == "minmax")
          norm = fu::ScoreNorm::MinMax;
        else if (method == "zscore")
          norm = fu::ScoreNorm::ZScore;
        else
          throw py::value_error("method must be 'minmax' or 'zscore', got '" + method + "'");
        std::vector<py::array_t<int64_t>> keep;
        keep.reserve(L);
        std::vector<std::vector<int64_t>> owned(L);
        std::vector<py::array_t<float>> keep_scores;
        std::vector<fu::ScoredList> views(L);
        for (size_t l = 0; l < L; ++l) {
          fu::IdList ids;
          read_id_list(id_lists[l], l, keep, owned, ids);
          auto s = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(score_lists[l]);
          if (!s || s.ndim() != 1 || size_t(s.shape(0)) != ids.size)
            throw py::value_error("score list " + std::to_string(l) + " must be 1-d with one score per id (" +
                                  std::to_string(ids.size) + ")");
          keep_scores.push_back(s);
          views[l] = {ids.ids, keep_scores.back().data(), ids.size};
        }
        std::vector<double> w = read_weights(weights, L);
        fu::Fused f;
        {
          py::gil_scoped_release release;
          f = fu::fuse_scores(views, norm, w.empty() ? nullptr : w.data(), top_n);
        }
        return to_numpy(f.ids, f.scores);
      },
      py::arg("id_lists"), py::arg("score_lists"), py::arg("method") = "minmax", py::arg("weights") = py::none(),
      py::arg("top_n") = 0);

  bind_cuda(m);
}

}  // namespace medretrieve::bindings
