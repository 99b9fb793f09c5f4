// Argument readers of the index bindings: Python objects to native values,
// with the checks and the messages users see. Every user-facing check of an
// index call lives here, once; the Python wrappers (medretrieve/index/) pass
// arguments through, and the core checks only what it alone can tell (k
// against the element count, finite components, ids already stored).
//
// Errors: TypeError for a wrong kind of value, medretrieve.IndexInputError
// (a ValueError and a RuntimeError: the native API promises ValueError,
// hnswlib raises RuntimeError for the same mistakes) for a wrong value.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace medretrieve::bindings {

namespace py = pybind11;

// Thrown by the readers; surfaces as _core.IndexInputError.
struct InputError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// Defines _core.IndexInputError and translates InputError to it.
void register_input_error(py::module_& m);

// Ids are integers in [0, kMaxId]: searches return int64 ids with -1 as padding.
constexpr uint64_t kMaxId = uint64_t(INT64_MAX);
constexpr uint64_t kMaxLabel = UINT32_MAX;

// An integer: a Python int or a NumPy integer, never a bool or a float
// (TypeError "<what> must be an integer, got <type>"); InputError when it
// does not fit in int64.
long long int_arg(py::handle v, const char* what);
// A positive count (k, fetch_k, ef): InputError below 1.
size_t count_arg(py::handle v, const char* what);
// num_threads: None or <= 0 means every core (-1); larger than INT_MAX is capped.
int threads_arg(py::handle v);
// A real number (not a bool) in [lo, hi]; NaN is outside.
double real_arg(py::handle v, const char* what, double lo, double hi);

// Rows of width dim as C-contiguous float32: a 1-d array-like is one row.
// Non-numeric data is a TypeError; values beyond float32 become inf, which
// the core rejects with the other non-finite values.
struct Rows {
  py::array_t<float, py::array::c_style | py::array::forcecast> array;
  const float* data = nullptr;
  size_t n = 0;
};
Rows rows_arg(py::handle v, size_t dim, const char* what);

// search(allowed=): None, or a packed bitset over ids (bit id % 64 of word id / 64)
// as a 1-d uint64 NumPy array, held (not copied) while a search reads it. The
// Python wrappers pack a bool mask first (medretrieve/index/allowed.py).
struct AllowedBits {
  py::array_t<uint64_t, py::array::c_style> array;
  const uint64_t* words = nullptr;
  size_t n_words = 0;
};
std::optional<AllowedBits> allowed_arg(py::handle v);

// One id (mark_deleted, labels_of...).
uint64_t id_arg(py::handle v);
// n ids, one per row (a scalar counts as one); None: no ids.
std::optional<std::vector<uint64_t>> ids_arg(py::handle v, size_t n);
// get_items' ids: any shape, flattened (as hnswlib reads knn_query's labels);
// a single id is a ValueError, as in hnswlib.
std::vector<uint64_t> item_ids_arg(py::handle v);

// Labels per row: None, a 1-d integer array (one label per row) or a
// sequence holding an int or a list of ints per row; each in [0, 2**32 - 1].
std::optional<std::vector<std::vector<uint32_t>>> row_labels_arg(py::handle v, size_t n);
// A search's labels: None, one int or an iterable of ints.
std::optional<std::vector<uint32_t>> query_labels_arg(py::handle v);
// A search's ef: None (empty), one int or one per query (nq).
std::vector<size_t> ef_arg(py::handle v, size_t nq);

}  // namespace medretrieve::bindings
