// Bindings for the HNSW index and the flat index: type conversion, argument
// checks, GIL release. The Python wrappers (medretrieve/index.py) normalise
// inputs (dtype, contiguity, 1-d rows, label lists) before calling in here.
// Every call that takes an index lock releases the GIL first: a search running
// a Python filter needs the GIL in its worker threads while holding the lock
// shared, so waiting for the lock with the GIL held could deadlock.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "index/flat.h"
#include "index/hnsw.h"
#include "kernels/distances.h"

namespace py = pybind11;
namespace mi = medretrieve::index;

namespace medretrieve::bindings {
namespace {

template <typename T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

// Rows of a 2-d float32 matrix with `dim` columns; NaN, inf and |x| > 1e15 rejected.
const float* rows_of(const CArray<float>& a, size_t dim, size_t* n, const char* what) {
  if (a.ndim() != 1 && a.ndim() != 2) throw std::invalid_argument(std::string(what) + " must be a 1-d or 2-d array");
  const size_t cols = size_t(a.shape(a.ndim() - 1));
  if (cols != dim)
    throw std::invalid_argument("Wrong dimensionality of the " + std::string(what) + ": got " + std::to_string(cols) +
                                ", the index has dim=" + std::to_string(dim));
  *n = a.ndim() == 2 ? size_t(a.shape(0)) : 1;  // a 1-d array is one row
  mi::check_components(a.data(), *n, dim, what);
  return a.data();
}

// Labels as CSR: row i has values[offsets[i]:offsets[i+1]].
std::optional<std::vector<std::vector<uint32_t>>> labels_of(const std::optional<CArray<int64_t>>& offsets,
                                                           const std::optional<CArray<uint32_t>>& values, size_t n) {
  if (!offsets) return std::nullopt;
  if (!values) throw std::invalid_argument("label values missing");
  if (offsets->ndim() != 1 || size_t(offsets->shape(0)) != n + 1)
    throw std::invalid_argument("labels must have one entry per row");
  const int64_t* off = offsets->data();
  const size_t nv = size_t(values->size());
  std::vector<std::vector<uint32_t>> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (off[i] < 0 || off[i] > off[i + 1] || size_t(off[i + 1]) > nv) throw std::invalid_argument("malformed label offsets");
    out[i].assign(values->data() + off[i], values->data() + off[i + 1]);
  }
  return out;
}

std::optional<mi::LabelQuery> label_query(const std::optional<std::vector<uint32_t>>& labels) {
  if (!labels) return std::nullopt;
  return mi::LabelQuery::make(*labels);
}

// A Python predicate on external ids, called with the GIL held (from any worker).
template <typename IndexT>
std::optional<mi::IdPredicate> predicate_of(const IndexT& index, const std::optional<py::function>& fn) {
  if (!fn) return std::nullopt;
  py::function f = *fn;
  const mi::VectorStore* store = &index.store();
  const SharedMutex* mu = &index.mutex();
  return mi::IdPredicate([f, store, mu](uint32_t id) {
    const uint64_t ext = store->ext_id(id);
    // The search holds the index lock shared while the filter runs: the
    // filter may read the index even while a writer waits (common/shared_mutex.h).
    SharedMutex::ReentrantReads reentry(*mu);
    py::gil_scoped_acquire gil;
    return f(ext).template cast<bool>();
  });
}

void check_positive_k(long long k) {
  if (k < 1) throw std::invalid_argument("k must be a positive integer, got " + std::to_string(k));
}

py::tuple result_arrays(size_t nq, size_t k, std::vector<int64_t>& ids, std::vector<float>& scores) {
  py::array_t<int64_t> a({nq, k});
  py::array_t<float> b({nq, k});
  std::copy(ids.begin(), ids.end(), a.mutable_data());
  std::copy(scores.begin(), scores.end(), b.mutable_data());
  return py::make_tuple(a, b);
}

template <typename T>
py::array_t<T> matrix_of(const std::vector<T>& v, size_t n, size_t dim) {
  py::array_t<T> out({n, dim});
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

template <typename T>
py::array_t<T> vector_of_values(const std::vector<T>& v) {
  py::array_t<T> out(v.size());
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

py::dict hnsw_stats(const mi::Hnsw& h) {
  py::dict d;
  const auto& p = h.params();
  d["space"] = medretrieve::metric_name(p.space);
  d["dtype"] = mi::dtype_name(p.dtype);
  d["dim"] = p.dim;
  d["M"] = p.M;
  d["ef_construction"] = p.ef_construction;
  d["ef"] = h.ef();
  d["count"] = h.count();
  d["deleted"] = h.deleted_count();
  d["max_elements"] = h.capacity();
  d["max_level"] = h.max_level();
  d["keep_float"] = p.keep_float;
  d["allow_replace_deleted"] = p.allow_replace_deleted;
  d["prune_alpha"] = p.prune_alpha;
  d["centre_trained"] = h.store().trained();
  d["read_only"] = h.read_only();
  d["bytes_per_slab"] = h.store().stride();
  d["link_bits"] = h.store().link_bits();
  size_t memory;
  {
    py::gil_scoped_release nogil;
    memory = h.memory_bytes();
  }
  d["memory_bytes"] = memory;
  d["filter_exact_factor"] = h.filter_exact_factor();
  d["simd_level"] = medretrieve::kernels::level_name(medretrieve::kernels::active().level);
  return d;
}

}  // namespace

void bind_index(py::module_& m) {
  py::class_<mi::Hnsw>(m, "HnswIndex", "Native int8/float32 HNSW index (use medretrieve.Index).")
      .def(py::init([](const std::string& space, const std::string& dtype, size_t dim, size_t max_elements, size_t M,
                       size_t ef_construction, uint64_t seed, bool keep_float, bool allow_replace_deleted,
                       float prune_alpha) {
             mi::HnswParams p;
             p.space = medretrieve::parse_metric(space, "space");
             p.dtype = mi::parse_dtype(dtype);
             p.dim = dim;
             p.max_elements = max_elements;
             p.M = M;
             p.ef_construction = ef_construction;
             p.seed = seed;
             p.keep_float = keep_float;
             p.allow_replace_deleted = allow_replace_deleted;
             p.prune_alpha = prune_alpha;
             return std::make_unique<mi::Hnsw>(p);
           }),
           py::arg("space"), py::arg("dtype"), py::arg("dim"), py::arg("max_elements"), py::arg("M"),
           py::arg("ef_construction"), py::arg("seed"), py::arg("keep_float"), py::arg("allow_replace_deleted"),
           py::arg("prune_alpha") = mi::HnswParams::kDefaultPruneAlpha)
      .def("add",
           [](mi::Hnsw& self, CArray<float> data, std::optional<CArray<uint64_t>> ids,
              std::optional<CArray<int64_t>> label_offsets, std::optional<CArray<uint32_t>> label_values,
              int num_threads, bool update, bool replace_deleted) {
             size_t n;
             const float* p = rows_of(data, self.params().dim, &n, "vectors");
             if (ids && (ids->ndim() != 1 || size_t(ids->shape(0)) != n))
               throw std::invalid_argument("ids must have one entry per row");
             auto labels = labels_of(label_offsets, label_values, n);
             py::gil_scoped_release nogil;
             self.add(p, n, ids ? ids->data() : nullptr, labels ? &*labels : nullptr, num_threads, update, replace_deleted);
           },
           py::arg("data"), py::arg("ids") = py::none(), py::arg("label_offsets") = py::none(),
           py::arg("label_values") = py::none(), py::arg("num_threads") = -1, py::arg("update") = false,
           py::arg("replace_deleted") = false)
      .def("search",
           [](const mi::Hnsw& self, CArray<float> queries, long long k, std::optional<CArray<uint64_t>> ef,
              std::optional<std::vector<uint32_t>> labels, std::optional<py::function> filter, int num_threads) {
             check_positive_k(k);
             size_t nq;
             const float* q = rows_of(queries, self.params().dim, &nq, "queries");
             if (ef && (ef->ndim() != 1 || (ef->shape(0) != 1 && size_t(ef->shape(0)) != nq)))
               throw std::invalid_argument("ef must be one int or one per query (" + std::to_string(nq) + ")");
             std::vector<size_t> efs;
             if (ef) efs.assign(ef->data(), ef->data() + ef->shape(0));
             auto lq = label_query(labels);
             auto pred = predicate_of(self, filter);
             mi::check_k(size_t(k), self.count());  // before allocating the padded rows
             std::vector<int64_t> ids(mi::result_cells(nq, size_t(k)));
             std::vector<float> scores(ids.size());
             {
               py::gil_scoped_release nogil;
               self.search(q, nq, size_t(k), ef ? efs.data() : nullptr, efs.size(), lq ? &*lq : nullptr,
                           pred ? &*pred : nullptr, num_threads, ids.data(), scores.data());
             }
             return result_arrays(nq, size_t(k), ids, scores);
           },
           py::arg("queries"), py::arg("k"), py::arg("ef") = py::none(), py::arg("labels") = py::none(),
           py::arg("filter") = py::none(), py::arg("num_threads") = -1)
      .def("train",
           [](mi::Hnsw& self, CArray<float> sample) {
             size_t n;
             const float* p = rows_of(sample, self.params().dim, &n, "training vectors");
             py::gil_scoped_release nogil;
             self.train(p, n);
           })
      .def("mark_deleted", &mi::Hnsw::mark_deleted, py::call_guard<py::gil_scoped_release>())
      .def("unmark_deleted", &mi::Hnsw::unmark_deleted, py::call_guard<py::gil_scoped_release>())
      .def("resize", &mi::Hnsw::resize, py::call_guard<py::gil_scoped_release>())
      .def("set_allow_replace_deleted", &mi::Hnsw::set_allow_replace_deleted, py::arg("allow"),
           py::call_guard<py::gil_scoped_release>())
      .def("set_ef", &mi::Hnsw::set_ef)
      .def_property_readonly("ef", &mi::Hnsw::ef)
      .def("set_entry_beam", &mi::Hnsw::set_entry_beam)
      .def_property_readonly("entry_beam", &mi::Hnsw::entry_beam)
      .def("set_filter_exact_factor", &mi::Hnsw::set_filter_exact_factor)
      .def_property_readonly("count", &mi::Hnsw::count)
      .def_property_readonly("deleted_count", &mi::Hnsw::deleted_count)
      .def_property_readonly("capacity", &mi::Hnsw::capacity)
      .def_property_readonly("read_only", &mi::Hnsw::read_only)
      .def("ids", [](const mi::Hnsw& self) {
        std::vector<uint64_t> v;
        {
          py::gil_scoped_release nogil;  // never wait for the index lock while holding the GIL
          v = self.ids();
        }
        py::array_t<uint64_t> out(v.size());
        std::copy(v.begin(), v.end(), out.mutable_data());
        return out;
      })
      .def("get_items",
           [](const mi::Hnsw& self, CArray<uint64_t> ids) {
             if (ids.ndim() != 1) throw std::invalid_argument("ids must be a 1-d array");
             const size_t n = size_t(ids.shape(0)), dim = self.params().dim;
             py::array_t<float> out({n, dim});
             float* o = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               self.get_items(ids.data(), n, o);
             }
             return out;
           })
      .def("labels_of", &mi::Hnsw::labels_of, py::call_guard<py::gil_scoped_release>())
      .def("contains", &mi::Hnsw::contains)
      .def("is_deleted", &mi::Hnsw::is_deleted_ext)
      .def("memory_bytes", &mi::Hnsw::memory_bytes, py::call_guard<py::gil_scoped_release>())
      .def("stats", &hnsw_stats)
      .def("save", &mi::Hnsw::save, py::arg("path"), py::arg("snapshot") = true,
           py::call_guard<py::gil_scoped_release>())
      .def("to_bytes", [](const mi::Hnsw& self) {
        std::vector<char> b;
        {
          py::gil_scoped_release nogil;
          b = self.to_bytes();
        }
        return py::bytes(b.data(), b.size());
      })
      .def_static("load", &mi::Hnsw::load, py::arg("path"), py::arg("mmap") = false,
                  py::call_guard<py::gil_scoped_release>())
      .def_static("from_bytes", [](py::bytes b) {
        std::string_view v = b;
        return mi::Hnsw::from_bytes(v.data(), v.size());
      });

  py::class_<mi::FlatIndex>(m, "FlatIndexCore", "Native exact index (use medretrieve.FlatIndex).")
      .def(py::init([](const std::string& space, const std::string& dtype, size_t dim) {
             return std::make_unique<mi::FlatIndex>(medretrieve::parse_metric(space, "space"), mi::parse_dtype(dtype), dim);
           }),
           py::arg("space"), py::arg("dtype"), py::arg("dim"))
      .def("add",
           [](mi::FlatIndex& self, CArray<float> data, std::optional<CArray<uint64_t>> ids,
              std::optional<CArray<int64_t>> label_offsets, std::optional<CArray<uint32_t>> label_values,
              int num_threads, bool update, bool reuse_deleted, std::optional<size_t> max_live) {
             size_t n;
             const float* p = rows_of(data, self.store().dim(), &n, "vectors");
             if (ids && (ids->ndim() != 1 || size_t(ids->shape(0)) != n))
               throw std::invalid_argument("ids must have one entry per row");
             auto labels = labels_of(label_offsets, label_values, n);
             mi::FlatAddMode mode;
             mode.update = update;
             mode.reuse_deleted = reuse_deleted;
             if (max_live) mode.max_live = *max_live;
             py::gil_scoped_release nogil;
             self.add(p, n, ids ? ids->data() : nullptr, labels ? &*labels : nullptr, num_threads, mode);
           },
           py::arg("data"), py::arg("ids") = py::none(), py::arg("label_offsets") = py::none(),
           py::arg("label_values") = py::none(), py::arg("num_threads") = -1, py::arg("update") = false,
           py::arg("reuse_deleted") = false, py::arg("max_live") = py::none(),
           "update: existing ids take the new rows; reuse_deleted: new ids take deleted slots; max_live: "
           "RuntimeError when more live elements would result (hnswlib's BFIndex).")
      .def("search",
           [](const mi::FlatIndex& self, CArray<float> queries, long long k, std::optional<std::vector<uint32_t>> labels,
              std::optional<py::function> filter, int num_threads) {
             check_positive_k(k);
             size_t nq;
             const float* q = rows_of(queries, self.store().dim(), &nq, "queries");
             auto lq = label_query(labels);
             auto pred = predicate_of(self, filter);
             mi::check_k(size_t(k), self.count());  // before allocating the padded rows
             std::vector<int64_t> ids(mi::result_cells(nq, size_t(k)));
             std::vector<float> scores(ids.size());
             {
               py::gil_scoped_release nogil;
               self.search(q, nq, size_t(k), lq ? &*lq : nullptr, pred ? &*pred : nullptr, num_threads, ids.data(),
                           scores.data());
             }
             return result_arrays(nq, size_t(k), ids, scores);
           },
           py::arg("queries"), py::arg("k"), py::arg("labels") = py::none(), py::arg("filter") = py::none(),
           py::arg("num_threads") = -1)
      .def("train",
           [](mi::FlatIndex& self, CArray<float> sample) {
             size_t n;
             const float* p = rows_of(sample, self.store().dim(), &n, "training vectors");
             py::gil_scoped_release nogil;
             self.train(p, n);
           })
      .def("mark_deleted", &mi::FlatIndex::mark_deleted, py::call_guard<py::gil_scoped_release>())
      .def("unmark_deleted", &mi::FlatIndex::unmark_deleted, py::call_guard<py::gil_scoped_release>())
      .def("__len__", &mi::FlatIndex::size)
      .def_property_readonly("space", [](const mi::FlatIndex& self) { return std::string(medretrieve::metric_name(self.store().space())); })
      .def_property_readonly("dtype", [](const mi::FlatIndex& self) { return std::string(mi::dtype_name(self.store().dtype())); })
      .def_property_readonly("dim", [](const mi::FlatIndex& self) { return self.store().dim(); })
      .def_property_readonly("count", &mi::FlatIndex::count)
      .def_property_readonly("declared_max", &mi::FlatIndex::declared_max)
      .def("set_declared_max", &mi::FlatIndex::set_declared_max, py::arg("n"))
      .def("contains", &mi::FlatIndex::contains, py::call_guard<py::gil_scoped_release>())
      .def("is_deleted", &mi::FlatIndex::is_deleted_ext, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("read_only", &mi::FlatIndex::read_only)
      .def("ids", [](const mi::FlatIndex& self) {
        std::vector<uint64_t> v;
        {
          py::gil_scoped_release nogil;
          v = self.ids();
        }
        py::array_t<uint64_t> out(v.size());
        std::copy(v.begin(), v.end(), out.mutable_data());
        return out;
      })
      .def("get_items",
           [](const mi::FlatIndex& self, CArray<uint64_t> ids) {
             if (ids.ndim() != 1) throw std::invalid_argument("ids must be a 1-d array");
             const size_t n = size_t(ids.shape(0)), dim = self.store().dim();
             py::array_t<float> out({n, dim});
             float* o = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               self.get_items(ids.data(), n, o);
             }
             return out;
           })
      .def("_pack_live",
           [](const mi::FlatIndex& self) -> py::tuple {
             mi::PackedRows p;
             {
               py::gil_scoped_release nogil;
               p = self.pack_live();
             }
             const size_t n = p.ids.size(), dim = self.store().dim();
             py::array_t<int64_t> ids(n);
             std::copy(p.ids.begin(), p.ids.end(), ids.mutable_data());
             if (self.store().dtype() != mi::DType::Int8)
               return py::make_tuple(ids, matrix_of(p.rows, n, dim), py::none());
             return py::make_tuple(ids, matrix_of(p.codes, n, dim), vector_of_values(p.scales));
           },
           "(ids, int8 codes + scales | float rows, None) of the live rows, for a device copy.")
      .def("_pack_queries",
           [](const mi::FlatIndex& self, CArray<float> queries) -> py::tuple {
             size_t nq;
             const float* q = rows_of(queries, self.store().dim(), &nq, "queries");
             mi::PackedQueries p;
             {
               py::gil_scoped_release nogil;
               p = self.pack_queries(q, nq);
             }
             const size_t dim = self.store().dim();
             if (self.store().dtype() != mi::DType::Int8)
               return py::make_tuple(matrix_of(p.rows, nq, dim), py::none(), vector_of_values(p.offsets));
             return py::make_tuple(matrix_of(p.codes, nq, dim), vector_of_values(p.scales),
                                   vector_of_values(p.offsets));
           },
           "(int8 codes + scales | float rows, None, offsets) of queries prepared as search() prepares them.")
      .def("memory_bytes", &mi::FlatIndex::memory_bytes, py::call_guard<py::gil_scoped_release>())
      .def("save", &mi::FlatIndex::save, py::call_guard<py::gil_scoped_release>())
      .def("to_bytes", [](const mi::FlatIndex& self) {
        std::vector<char> b;
        {
          py::gil_scoped_release nogil;
          b = self.to_bytes();
        }
        return py::bytes(b.data(), b.size());
      })
      .def_static("load", &mi::FlatIndex::load, py::arg("path"), py::arg("mmap") = false,
                  py::call_guard<py::gil_scoped_release>())
      .def_static("from_bytes", [](py::bytes b) {
        std::string_view v = b;
        return mi::FlatIndex::from_bytes(v.data(), v.size());
      });
}

}  // namespace medretrieve::bindings
