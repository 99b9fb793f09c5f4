#include "bindings/convert.h"

#include "bindings/args.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace medretrieve::bindings {

void require_c_contiguous(const py::array& a, const char* name) {
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
}

py::tuple to_numpy(const std::vector<int64_t>& ids, const std::vector<float>& scores) {
  py::array_t<int64_t> a(ids.size());
  py::array_t<float> b(scores.size());
  std::copy(ids.begin(), ids.end(), a.mutable_data());
  std::copy(scores.begin(), scores.end(), b.mutable_data());
  return py::make_tuple(a, b);
}

fusion::MmrProblem mmr_problem(const py::handle& candidates, const py::handle& query, const py::handle& relevance,
                               const py::handle& scales, float lambda, const std::string& what) {
  fusion::MmrProblem p;
  py::array c = py::reinterpret_borrow<py::array>(candidates);
  if (c.ndim() != 2) throw py::value_error(what + "candidates must be a 2-d array (n, dim)");
  require_c_contiguous(c, "candidates");
  p.n = size_t(c.shape(0));
  p.dim = size_t(c.shape(1));
  p.lambda = lambda;
  if (has_dtype<float>(c)) {
    p.f32 = static_cast<const float*>(c.data());
  } else if (has_dtype<int8_t>(c)) {
    p.int8 = true;
    p.i8 = static_cast<const int8_t*>(c.data());
  } else {
    throw py::type_error(what + "candidates must be float32 or int8");
  }
  // Read whatever the dtype: check_problem refuses scales beside float32 rows.
  if (!scales.is_none()) p.scales = vector_of<float>(scales, p.n, (what + "scales").c_str());
  if (!query.is_none()) p.query = vector_of<float>(query, p.dim, (what + "query").c_str());
  if (!relevance.is_none()) p.relevance = vector_of<float>(relevance, p.n, (what + "relevance").c_str());
  fusion::check_problem(p, what);
  return p;
}

std::vector<float> lambdas_arg(const py::handle& lambdas, size_t B) {
  if (!py::isinstance<py::array>(lambdas) && !py::isinstance<py::sequence>(lambdas))
    return std::vector<float>(B, float(real_arg(lambdas, "lambdas", 0.0, 1.0)));
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(lambdas);
  if (!a || a.ndim() != 1 || size_t(a.shape(0)) != B)
    throw py::value_error("lambdas must be a number or have one entry per query (" + std::to_string(B) + ")");
  std::vector<float> out(B);
  for (size_t b = 0; b < B; ++b) {
    if (!(a.data()[b] >= 0.0 && a.data()[b] <= 1.0)) throw py::value_error("every lambda must be in [0, 1]");
    out[b] = float(a.data()[b]);
  }
  return out;
}

std::vector<fusion::MmrProblem> mmr_problems(const py::list& candidates, const py::handle& lambdas_in,
                                             const py::object& queries, const py::object& relevances,
                                             const py::object& scales) {
  const size_t B = py::len(candidates);
  const std::vector<float> lambdas = lambdas_arg(lambdas_in, B);
  auto item = [](const py::object& seq, size_t i) -> py::object {
    return seq.is_none() ? py::object(py::none()) : py::object(seq[py::int_(i)]);
  };
  std::vector<fusion::MmrProblem> problems;
  problems.reserve(B);
  for (size_t b = 0; b < B; ++b)
    problems.push_back(mmr_problem(candidates[b], item(queries, b), item(relevances, b), item(scales, b),
                                   lambdas[b], B > 1 ? "query " + std::to_string(b) + ": " : ""));
  return problems;
}

namespace {

// Reads one ranked list: a NumPy integer array (no copy when it is already
// C-contiguous int64) or any Python sequence of ints (read item by item).
void read_id_list(const py::handle& obj, size_t l, IdLists& into) {
  fusion::IdList& out = into.views[l];
  if (py::isinstance<py::array>(obj)) {
    py::array a = py::reinterpret_borrow<py::array>(obj);
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
      throw py::type_error("ranked list " + std::to_string(l) + " must hold integer ids, got dtype " +
                           std::string(py::str(a.dtype())));
    if (a.ndim() != 1) throw py::value_error("ranked list " + std::to_string(l) + " must be 1-d");
    if (kind == 'u' && a.itemsize() == 8) {  // forcecast to int64 would wrap ids >= 2**63 to negative ones
      auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
      for (py::ssize_t i = 0; i < u.shape(0); ++i)
        if (u.data()[i] > uint64_t(INT64_MAX))
          throw py::value_error("id " + std::to_string(u.data()[i]) + " in ranked list " + std::to_string(l) +
                                " does not fit in int64 (ids must be < 2**63)");
    }
    into.keep.push_back(py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a));
    out = {into.keep.back().data(), size_t(into.keep.back().shape(0))};
    return;
  }
  if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) || !py::isinstance<py::sequence>(obj))
    throw py::type_error("ranked list " + std::to_string(l) + " must be a sequence of integer ids");
  // PySequence_Fast: lists and tuples are read in place, item by item.
  py::object fast = py::reinterpret_steal<py::object>(PySequence_Fast(obj.ptr(), "ranked list is not a sequence"));
  if (!fast) throw py::error_already_set();
  const size_t n = size_t(PySequence_Fast_GET_SIZE(fast.ptr()));
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<int64_t>& v = into.owned[l];
  v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* o = items[i];
    py::object as_int;  // NumPy integer scalars and other __index__ types
    if (PyBool_Check(o))
      throw py::type_error("ranked list " + std::to_string(l) + " item " + std::to_string(i) +
                           " is a bool, not an int id");
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

}  // namespace

IdLists::IdLists(const py::sequence& lists) : owned(py::len(lists)), views(py::len(lists)) {
  keep.reserve(views.size());
  for (size_t l = 0; l < views.size(); ++l) read_id_list(lists[l], l, *this);
}

std::vector<double> read_weights(const py::handle& weights, size_t n_lists) {
  std::vector<double> w;
  if (weights.is_none()) return w;
  py::array raw = py::module_::import("numpy").attr("asarray")(weights);
  const char kind = raw.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error("weights must be numbers, got dtype " + std::string(py::str(raw.dtype())));
  if (raw.ndim() != 1 || size_t(raw.shape(0)) != n_lists)
    throw py::value_error("weights must have one entry per list (" + std::to_string(n_lists) + "), got shape " +
                          std::string(py::str(raw.attr("shape"))));
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(raw);
  w.assign(a.data(), a.data() + n_lists);
  for (double x : w)
    if (!std::isfinite(x) || x < 0) throw py::value_error("weights must be finite and >= 0");
  return w;
}

double rrf_k_arg(const py::handle& k) {
  const bool real = !PyBool_Check(k.ptr()) && py::isinstance(k, py::module_::import("numbers").attr("Real"));
  const double x = real ? PyFloat_AsDouble(k.ptr()) : -1.0;
  if (!std::isfinite(x) || x < 0) throw py::value_error("k must be a finite number >= 0, got " + std::string(py::repr(k)));
  return x;
}

}  // namespace medretrieve::bindings
