#include "bindings/args.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <sstream>

namespace medretrieve::bindings {

namespace {

const char* const kIdRule = "ids must be integers in [0, 2**63 - 1] (search returns int64 ids, with -1 as padding)";

std::string type_name(py::handle v) { return py::str(py::type::handle_of(v).attr("__name__")); }

py::module_ numpy() { return py::module_::import("numpy"); }

// Any array-like as an ndarray (NumPy's own conversion; ndarrays as they are).
py::array as_array(py::handle v) {
  if (py::isinstance<py::array>(v)) return py::reinterpret_borrow<py::array>(v);
  return numpy().attr("asarray")(v);
}

bool is_int_kind(const py::array& a) { return a.dtype().kind() == 'i' || a.dtype().kind() == 'u'; }

// An integer-like object (int, NumPy integer, anything with __index__) but
// not a bool or a float: its value as a Python int; else nullopt.
std::optional<py::int_> index_of(py::handle v) {
  PyObject* o = v.ptr();
  if (PyLong_CheckExact(o)) return py::reinterpret_borrow<py::int_>(v);
  if (PyBool_Check(o) || PyFloat_Check(o) || !PyIndex_Check(o)) return std::nullopt;
  PyObject* i = PyNumber_Index(o);
  if (!i) throw py::error_already_set();
  return py::reinterpret_steal<py::int_>(i);
}

// Overflow: +1 / -1 when the value does not fit in long long.
long long to_long_long(const py::int_& i, int* overflow) {
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

// One label value: an integer in [0, 2**32 - 1].
uint32_t label_value(py::handle v) {
  const long long x = int_arg(v, "labels");
  if (x < 0 || uint64_t(x) > kMaxLabel)
    throw InputError("labels must be in [0, 2**32 - 1], got " + std::to_string(x));
  return uint32_t(x);
}

// One row's labels: an int or an iterable of ints (a str is neither).
std::vector<uint32_t> label_list(py::handle row) {
  if (py::isinstance<py::str>(row) || py::isinstance<py::bytes>(row)) throw py::type_error("labels must be integers");
  if (index_of(row) || PyBool_Check(row.ptr())) return {label_value(row)};
  if (!py::isinstance<py::iterable>(row)) throw py::type_error("labels must be integers or lists of integers");
  std::vector<uint32_t> out;
  for (py::handle v : py::reinterpret_borrow<py::iterable>(row)) out.push_back(label_value(v));
  return out;
}

// The values of a 1-d integer ndarray, each in [min, kMaxId]: below min is
// InputError(low), above kMaxId InputError(high(value)).
template <typename High>
std::vector<uint64_t> bounded_values(const py::array& a, uint64_t min, const char* low, High high) {
  const size_t n = size_t(a.shape(0));
  std::vector<uint64_t> out(n);
  if (a.dtype().kind() == 'i') {
    auto s = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    for (size_t i = 0; i < n; ++i) {
      if (s.data()[i] < int64_t(min)) throw InputError(low);
      out[i] = uint64_t(s.data()[i]);
    }
  } else {
    auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    for (size_t i = 0; i < n; ++i) {
      if (u.data()[i] < min) throw InputError(low);
      if (u.data()[i] > kMaxId) throw InputError(high(u.data()[i]));
      out[i] = u.data()[i];
    }
  }
  return out;
}

// n ids from an integer ndarray (0-d = one id).
std::vector<uint64_t> ids_of_array(py::array a, size_t n) {
  if (a.ndim() == 0) a = a.attr("reshape")(1);
  if (a.ndim() != 1) throw InputError("ids must be a scalar or a 1-d sequence");
  if (size_t(a.shape(0)) != n)
    throw InputError("The input label shape " + std::to_string(a.shape(0)) +
                     " does not match the input data vector shape " + std::to_string(n));
  if (!is_int_kind(a)) throw py::type_error("ids must be integers, got dtype " + std::string(py::str(a.dtype())));
  return bounded_values(a, 0, "ids must be non-negative integers",
                        [](uint64_t v) { return "id " + std::to_string(v) + " is out of range: " + kIdRule; });
}

// A Python or NumPy bool: never an id, though NumPy converts one among ints to an int.
bool is_bool(py::handle v) { return PyBool_Check(v.ptr()) || py::isinstance(v, numpy().attr("bool_")); }

}  // namespace

void register_input_error(py::module_& m) {
  // Two bases (pybind11's py::exception takes one): ValueError for the native
  // API, RuntimeError for hnswlib's callers.
  py::object bases = py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError));
  PyObject* cls = PyErr_NewExceptionWithDoc(
      "medretrieve._core.IndexInputError",
      "Bad input to an index call: a ValueError (what the native API promises) and a RuntimeError (what hnswlib "
      "raises for the same mistakes), so code written for either keeps catching it.",
      bases.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object("IndexInputError", py::reinterpret_steal<py::object>(cls));
  static PyObject* translated = cls;  // owned by the module, which outlives every call
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(translated, e.what());
    }
  });
}

long long int_arg(py::handle v, const char* what) {
  const auto i = index_of(v);
  if (!i) throw py::type_error(std::string(what) + " must be an integer, got " + type_name(v));
  int overflow = 0;
  const long long x = to_long_long(*i, &overflow);
  if (overflow) throw InputError(std::string(what) + "=" + std::string(py::str(*i)) + " is too large");
  return x;
}

size_t count_arg(py::handle v, const char* what) {
  const long long x = int_arg(v, what);
  if (x < 1) throw InputError(std::string(what) + " must be a positive integer, got " + std::to_string(x));
  return size_t(x);
}

int threads_arg(py::handle v) {
  if (v.is_none()) return -1;
  const auto i = index_of(v);
  if (!i) throw py::type_error("num_threads must be an integer, got " + type_name(v));
  int overflow = 0;
  const long long x = to_long_long(*i, &overflow);
  if (overflow) return overflow > 0 ? INT_MAX : -1;
  return x <= 0 ? -1 : int(std::min<long long>(x, INT_MAX));
}

double real_arg(py::handle v, const char* what, double lo, double hi) {
  PyObject* o = v.ptr();
  const bool real = PyFloat_Check(o) || (PyLong_Check(o) && !PyBool_Check(o)) ||
                    py::isinstance(v, py::module_::import("numbers").attr("Real"));
  if (!real || PyBool_Check(o)) throw py::type_error(std::string(what) + " must be a real number, got " + type_name(v));
  const double x = PyFloat_AsDouble(o);
  if (x == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  if (!(x >= lo && x <= hi)) {  // also NaN
    std::ostringstream msg;
    msg << what << " must be in [" << lo << ", " << hi << "], got " << std::string(py::repr(v));
    throw InputError(msg.str());
  }
  return x;
}

Rows rows_arg(py::handle v, size_t dim, const char* what) {
  py::array a = as_array(v);
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error(std::string(what) + " must be a numeric array (float or int), got dtype " +
                         std::string(py::str(a.dtype())));
  if (a.ndim() != 1 && a.ndim() != 2)
    throw InputError(std::string(what) + " must be a 1-d or 2-d array, got " + std::to_string(a.ndim()) + " dimensions");
  const size_t cols = size_t(a.shape(a.ndim() - 1));
  if (cols != dim)
    throw InputError("Wrong dimensionality of the " + std::string(what) + ": got " + std::to_string(cols) +
                     ", the index has dim=" + std::to_string(dim));
  if (!a.dtype().is(py::dtype::of<float>())) {
    // Values beyond float32 become inf (rejected with NaN below), without NumPy's overflow warning.
    py::object quiet = numpy().attr("errstate")(py::arg("over") = "ignore", py::arg("invalid") = "ignore");
    quiet.attr("__enter__")();
    py::object cast;
    try {
      cast = a.attr("astype")(numpy().attr("float32"));
    } catch (...) {
      quiet.attr("__exit__")(py::none(), py::none(), py::none());
      throw;
    }
    quiet.attr("__exit__")(py::none(), py::none(), py::none());
    a = cast;
  }
  Rows r;
  r.array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  r.n = a.ndim() == 2 ? size_t(a.shape(0)) : 1;
  r.data = r.array.data();
  return r;
}

uint64_t id_arg(py::handle v) {
  const auto i = index_of(v);
  if (!i) {
    if (is_bool(v) || PyFloat_Check(v.ptr()) || py::isinstance(v, numpy().attr("floating")))
      throw py::type_error("ids must be integers, got " + type_name(v) + " " + std::string(py::repr(v)));
    throw py::type_error("ids must be integers, got " + type_name(v));
  }
  int overflow = 0;
  const long long x = to_long_long(*i, &overflow);
  if (overflow < 0 || (!overflow && x < 0)) throw InputError("ids must be non-negative integers");
  if (overflow) throw InputError("id " + std::string(py::str(*i)) + " is out of range: " + kIdRule);
  return uint64_t(x);
}

std::optional<std::vector<uint64_t>> ids_arg(py::handle v, size_t n) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::array>(v)) return ids_of_array(py::reinterpret_borrow<py::array>(v), n);
  if (index_of(v) || PyBool_Check(v.ptr()) || PyFloat_Check(v.ptr())) {
    std::vector<uint64_t> one{id_arg(v)};
    if (n != 1)
      throw InputError("The input label shape 1 does not match the input data vector shape " + std::to_string(n));
    return one;
  }
  // a string is iterable, and an empty one would pass as zero ids
  if (py::isinstance<py::str>(v) || py::isinstance<py::bytes>(v))
    throw py::type_error("ids must be integers, got " + type_name(v));
  // Python sequences: NumPy's conversion when it gives integers (lists of ints), else item by item (a list mixing
  // large and negative ints would become float64, and floats must be refused, not rounded).
  // A bool among ints converts to an integer array too ([0, True] -> [0, 1]): such a list goes item by item, where
  // id_arg refuses the bool.
  const auto holds_bool = [&v] {
    if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) return false;
    for (py::handle item : py::reinterpret_borrow<py::iterable>(v))
      if (is_bool(item)) return true;
    return false;
  };
  py::array a = as_array(v);
  if (is_int_kind(a) && !holds_bool()) return ids_of_array(a, n);
  if (!py::isinstance<py::iterable>(v)) throw py::type_error("ids must be integers, got " + type_name(v));
  std::vector<uint64_t> out;
  for (py::handle item : py::reinterpret_borrow<py::iterable>(v)) out.push_back(id_arg(item));
  if (out.size() != n)
    throw InputError("The input label shape " + std::to_string(out.size()) +
                     " does not match the input data vector shape " + std::to_string(n));
  return out;
}

std::vector<uint64_t> item_ids_arg(py::handle v) {
  py::array a = as_array(v);
  if (a.ndim() == 0)
    throw py::value_error("get_items takes a list of ids and returns one vector per id: pass [id] for one");
  a = a.attr("reshape")(-1);
  return ids_of_array(a, size_t(a.shape(0)));
}

std::optional<std::vector<std::vector<uint32_t>>> row_labels_arg(py::handle v, size_t n) {
  if (v.is_none()) return std::nullopt;
  std::vector<std::vector<uint32_t>> out;
  if (py::isinstance<py::array>(v)) {
    py::array a = py::reinterpret_borrow<py::array>(v);
    if (a.ndim() == 1 && is_int_kind(a)) {  // one label per row, the fast path
      if (size_t(a.shape(0)) != n)
        throw InputError("labels must have one entry per row (" + std::to_string(n) + "), got " +
                         std::to_string(a.shape(0)));
      auto s = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
      out.resize(n);
      for (size_t i = 0; i < n; ++i) {
        if (s.data()[i] < 0 || uint64_t(s.data()[i]) > kMaxLabel) throw InputError("labels must be in [0, 2**32 - 1]");
        out[i] = {uint32_t(s.data()[i])};
      }
      return out;
    }
  }
  if (index_of(v)) throw py::type_error("labels must be a sequence with one entry (an int or a list of ints) per row");
  if (!py::isinstance<py::iterable>(v)) throw py::type_error("labels must be integers or lists of integers");
  for (py::handle row : py::reinterpret_borrow<py::iterable>(v)) out.push_back(label_list(row));
  if (out.size() != n)
    throw InputError("labels must have one entry per row (" + std::to_string(n) + "), got " + std::to_string(out.size()));
  return out;
}

std::optional<std::vector<uint32_t>> query_labels_arg(py::handle v) {
  if (v.is_none()) return std::nullopt;
  return label_list(v);
}

std::vector<size_t> ef_arg(py::handle v, size_t nq) {
  if (v.is_none()) return {};
  const char* const kRange = "ef values must be integers in [1, 2**63 - 1]";
  if (PyBool_Check(v.ptr())) throw py::type_error("ef must be an int or an array of ints");
  if (PyLong_Check(v.ptr())) {  // one Python int, the common call, read as it is (NumPy took half a 1.9 us call)
    int overflow = 0;
    const long long x = to_long_long(py::reinterpret_borrow<py::int_>(v), &overflow);
    if (overflow) throw InputError(kRange);
    if (x < 1) throw InputError("ef values must be positive");
    return {size_t(x)};
  }
  py::array a = as_array(v);
  if (a.dtype().kind() == 'O') {  // Python ints beyond 64 bits
    const py::list items = a.attr("reshape")(-1).attr("tolist")();
    for (py::handle item : items)
      if (!PyLong_Check(item.ptr()) || PyBool_Check(item.ptr())) throw py::type_error("ef must be an int or an array of ints");
    throw InputError(kRange);
  }
  if (!is_int_kind(a)) throw py::type_error("ef must be an int or an array of ints");
  a = a.attr("reshape")(-1);
  const size_t m = size_t(a.shape(0));
  if (m != 1 && m != nq)
    throw InputError("ef must be one int or one per query (" + std::to_string(nq) + "), got " + std::to_string(m));
  const std::vector<uint64_t> values =
      bounded_values(a, 1, "ef values must be positive", [&](uint64_t) { return kRange; });
  std::vector<size_t> out(values.begin(), values.end());
  return out;
}

std::optional<AllowedBits> allowed_arg(py::handle v) {
  if (v.is_none()) return std::nullopt;
  if (!py::isinstance<py::array>(v) || py::reinterpret_borrow<py::array>(v).dtype().kind() != 'u' ||
      py::reinterpret_borrow<py::array>(v).itemsize() != 8)
    throw py::type_error("allowed must be a packed uint64 bitset (medretrieve.index.allowed_bitset / pack_allowed)");
  AllowedBits bits;
  bits.array = py::array_t<uint64_t, py::array::c_style>::ensure(v);  // a copy only when not C-contiguous
  if (!bits.array) throw py::type_error("allowed: cannot read the bitset as contiguous uint64");
  if (bits.array.ndim() != 1)
    throw InputError("allowed must be a 1-d bitset, got " + std::to_string(bits.array.ndim()) + " dimensions");
  bits.words = bits.array.data();
  bits.n_words = size_t(bits.array.shape(0));
  return bits;
}

}  // namespace medretrieve::bindings
