// Conversions shared by the binding files: NumPy arrays and Python sequences
// to the raw pointers the core takes (checked: dtype, shape, contiguity), and
// core results back to NumPy. Objects read here stay owned by Python; the
// structs below keep them alive while the core runs without the GIL.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fusion/mmr_batch.h"
#include "fusion/rrf.h"

namespace medretrieve::bindings {

namespace py = pybind11;

template <typename T>
bool has_dtype(const py::array& a) {
  return a.dtype().is(py::dtype::of<T>());
}

// Throws ValueError "<name> must be C-contiguous".
void require_c_contiguous(const py::array& a, const char* name);

// A 1-d C-contiguous array of exactly n T's (TypeError on another dtype).
template <typename T>
const T* vector_of(const py::handle& h, size_t n, const char* name) {
  py::array a = py::reinterpret_borrow<py::array>(h);
  if (!has_dtype<T>(a)) throw py::type_error(std::string(name) + " has the wrong dtype");
  require_c_contiguous(a, name);
  if (a.ndim() != 1 || size_t(a.shape(0)) != n)
    throw py::value_error(std::string(name) + " must be 1-d with " + std::to_string(n) + " entries");
  return static_cast<const T*>(a.data());
}

// (ids int64 [n], scores float32 [n]).
py::tuple to_numpy(const std::vector<int64_t>& ids, const std::vector<float>& scores);

// One MMR problem from Python objects (candidates float32 / int8 (n, dim);
// query, relevance, scales: float32 vectors or None), checked with
// fusion::check_problem (messages prefixed with `what`).
fusion::MmrProblem mmr_problem(const py::handle& candidates, const py::handle& query, const py::handle& relevance,
                               const py::handle& scales, float lambda, const std::string& what);
// One problem per entry of `candidates`; lambdas is one real number for
// every problem or one per problem, each in [0, 1] (the one place MMR's
// lambda is checked); queries / relevances / scales are None or one entry
// (possibly None) per problem.
std::vector<fusion::MmrProblem> mmr_problems(const py::list& candidates, const py::handle& lambdas,
                                             const py::object& queries, const py::object& relevances,
                                             const py::object& scales);

// Every ranked id list of a fusion call, read once: views point into NumPy
// arrays (kept alive here) or into int64 copies of Python sequences.
struct IdLists {
  std::vector<py::array_t<int64_t>> keep;
  std::vector<std::vector<int64_t>> owned;
  std::vector<fusion::IdList> views;
  explicit IdLists(const py::sequence& lists);
};

// None -> empty; else one number per list, finite and >= 0 (TypeError for
// non-numbers, ValueError otherwise): the one place fusion weights are checked.
std::vector<double> read_weights(const py::handle& weights, size_t n_lists);
// RRF's k: a finite real number >= 0 (ValueError otherwise), checked once here.
double rrf_k_arg(const py::handle& k);

}  // namespace medretrieve::bindings
