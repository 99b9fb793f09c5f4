// Bindings for the HNSW index and the flat index: type conversion, argument
// checks (bindings/args.h: the one layer that checks what users pass), GIL
// release. The Python wrappers (medretrieve/index/) pass arguments through.
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

#include "bindings/args.h"
#include "bindings/bindings.h"
#include "index/flat.h"
#include "index/hnsw.h"
#include "kernels/distances.h"

namespace py = pybind11;
namespace mi = medretrieve::index;

namespace medretrieve::bindings {
namespace {

// Components finite and within range (the core's rule, vector_store.h).
const float* finite_rows(const Rows& r, size_t dim, const char* what) {
  mi::check_components(r.data, r.n, dim, what);
  return r.data;
}

std::optional<mi::LabelQuery> label_query(py::handle labels) {
  auto values = query_labels_arg(labels);
  if (!values) return std::nullopt;
  return mi::LabelQuery::make(*values);
}

// A Python predicate on external ids, called with the GIL held (from any worker).
template <typename IndexT>
std::optional<mi::IdPredicate> predicate_of(const IndexT& index, const std::optional<py::function>& fn) {
  if (!fn) return std::nullopt;
  py::function f = *fn;
  const mi::VectorStore* store = &index.store();
  const SharedMutex* mu = &index.mutex();
  mi::IdPredicate predicate([f, store, mu](uint32_t id) {
    const uint64_t ext = store->ext_id(id);
    // The search holds the index lock shared while the filter runs: the
    // filter may read the index even while a writer waits (common/shared_mutex.h).
    SharedMutex::ReentrantReads reentry(*mu);
    py::gil_scoped_acquire gil;  // nothing to wait for under hold()'s
    return f(ext).template cast<bool>();
  });
  // The GIL for a run of calls: acquiring it per call was 35-65% of a
  // single-threaded filtered scan's filter time (10k x 16, 200 queries).
  predicate.hold = [] { return std::static_pointer_cast<void>(std::make_shared<py::gil_scoped_acquire>()); };
  return predicate;
}

mi::ExternalBits external_bits(const std::optional<AllowedBits>& allowed) {
  return allowed ? mi::ExternalBits{allowed->words, allowed->n_words} : mi::ExternalBits{};
}

// A callable filter(id) -> bool, or None.
std::optional<py::function> filter_arg(py::handle filter) {
  if (filter.is_none()) return std::nullopt;
  if (!PyCallable_Check(filter.ptr())) throw py::type_error("filter must be callable: filter(label) -> bool");
  return py::reinterpret_borrow<py::function>(filter);
}

// A non-negative integer construction parameter.
size_t param_arg(py::handle v, const char* name) {
  const auto bad = [&] {
    return InputError(std::string(name) + " must be a non-negative integer, got " + std::string(py::repr(v)));
  };
  if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr())) throw bad();
  const long long x = int_arg(v, name);
  if (x < 0) throw bad();
  return size_t(x);
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
  d["scan_sketches"] = h.scan_sketches();
  d["simd_level"] = medretrieve::kernels::level_name(medretrieve::kernels::active().level);
  return d;
}

}  // namespace

void bind_index(py::module_& m) {
  register_input_error(m);
  // search(..., allowed=<packed uint64 bitset>) is understood (medretrieve/index/allowed.py checks for it).
  m.attr("SEARCH_ALLOWED_BITSET") = true;

  py::class_<mi::CompiledFilter, std::shared_ptr<mi::CompiledFilter>>(
      m, "CompiledFilter",
      "A row filter compiled by one HNSW index for the searches that reuse it (Index.compile_filter): "
      "search(..., allowed=it).")
      .def_property_readonly("count", [](const mi::CompiledFilter& f) { return f.rows.count; },
                             "Allowed elements when compiled.")
      .def_property_readonly("linked", [](const mi::CompiledFilter& f) { return f.graph.built(); },
                             "Whether the allowed elements' two-hop links were built (filters under 35% of the rows).")
      .def_property_readonly("memory_bytes", [](const mi::CompiledFilter& f) { return f.memory_bytes(); },
                             "Bytes it holds (bitsets and links).")
      .def_property_readonly(
          "bits",
          [](const mi::CompiledFilter& f) {
            return py::array_t<uint64_t>(py::ssize_t(f.ext_words.size()), f.ext_words.data());  // a copy
          },
          "The bitset over external ids it was compiled from (a copy).");

  py::class_<mi::Hnsw>(m, "HnswIndex", "Native int8/float32 HNSW index (use medretrieve.Index).")
      .def(py::init([](const std::string& space, const std::string& dtype, size_t dim, py::object max_elements,
                       py::object M, py::object ef_construction, py::object seed, bool keep_float,
                       bool allow_replace_deleted, py::object prune_alpha) {
             mi::HnswParams p;
             p.space = medretrieve::parse_metric(space, "space");
             p.dtype = mi::parse_dtype(dtype);
             p.dim = dim;
             p.max_elements = param_arg(max_elements, "max_elements");
             p.M = param_arg(M, "M");
             p.ef_construction = std::max<size_t>(1, param_arg(ef_construction, "ef_construction"));
             if (p.M < 2) throw InputError("M must be at least 2");
             if (keep_float && p.dtype != mi::DType::Int8) throw InputError("keep_float only applies to dtype='int8'");
             const uint64_t s = PyLong_AsUnsignedLongLongMask(py::int_(seed).ptr());  // hnswlib's seeds wrap
             if (PyErr_Occurred()) throw py::error_already_set();
             p.seed = s;
             p.keep_float = keep_float;
             p.allow_replace_deleted = allow_replace_deleted;
             if (!prune_alpha.is_none()) {
               const bool number = !PyBool_Check(prune_alpha.ptr()) &&
                                   py::isinstance(prune_alpha, py::module_::import("numbers").attr("Real"));
               const double a = number ? PyFloat_AsDouble(prune_alpha.ptr()) : 0.0;
               if (!(a >= mi::HnswParams::kMinPruneAlpha && a <= mi::HnswParams::kMaxPruneAlpha))
                 throw InputError("prune_alpha must be a number in [1, 2], got " + std::string(py::repr(prune_alpha)));
               p.prune_alpha = float(a);
             }
             return std::make_unique<mi::Hnsw>(p);
           }),
           py::arg("space"), py::arg("dtype"), py::arg("dim"), py::arg("max_elements"), py::arg("M"),
           py::arg("ef_construction"), py::arg("seed"), py::arg("keep_float"), py::arg("allow_replace_deleted"),
           py::arg("prune_alpha") = py::none())
      .def("add",
           [](mi::Hnsw& self, py::handle data, py::handle ids, py::handle labels, py::handle num_threads, bool update,
              bool replace_deleted) {
             const size_t dim = self.params().dim;
             const Rows rows = rows_arg(data, dim, "vectors");
             const float* p = finite_rows(rows, dim, "vectors");
             const auto ext = ids_arg(ids, rows.n);
             const auto row_labels = row_labels_arg(labels, rows.n);
             const int threads = threads_arg(num_threads);
             py::gil_scoped_release nogil;
             self.add(p, rows.n, ext ? ext->data() : nullptr, row_labels ? &*row_labels : nullptr, threads, update,
                      replace_deleted);
           },
           py::arg("data"), py::arg("ids") = py::none(), py::arg("labels") = py::none(),
           py::arg("num_threads") = py::none(), py::arg("update") = false, py::arg("replace_deleted") = false)
      .def("search",
           [](const mi::Hnsw& self, py::handle queries, py::handle k_arg, py::handle ef_values, py::handle labels,
              py::handle filter, py::handle num_threads, py::handle allowed_v) {
             const size_t dim = self.params().dim;
             const Rows rows = rows_arg(queries, dim, "queries");
             const size_t k = count_arg(k_arg, "k");
             const float* q = finite_rows(rows, dim, "queries");
             const std::vector<size_t> efs = ef_arg(ef_values, rows.n);
             auto lq = label_query(labels);
             auto pred = predicate_of(self, filter_arg(filter));
             const int threads = threads_arg(num_threads);
             // allowed: a bitset, or a filter compile_filter made (held by this frame for the call)
             std::shared_ptr<mi::CompiledFilter> compiled;
             if (!allowed_v.is_none() && py::isinstance<mi::CompiledFilter>(allowed_v))
               compiled = allowed_v.cast<std::shared_ptr<mi::CompiledFilter>>();
             const auto allowed = compiled ? std::nullopt : allowed_arg(allowed_v);
             const mi::ExternalBits bits = external_bits(allowed);
             mi::check_k(k, self.count());  // before allocating the padded rows
             std::vector<int64_t> ids(mi::result_cells(rows.n, k));
             std::vector<float> scores(ids.size());
             {
               py::gil_scoped_release nogil;
               self.search(q, rows.n, k, efs.empty() ? nullptr : efs.data(), efs.size(), lq ? &*lq : nullptr,
                           pred ? &*pred : nullptr, threads, ids.data(), scores.data(), allowed ? &bits : nullptr,
                           compiled.get());
             }
             return result_arrays(rows.n, k, ids, scores);
           },
           py::arg("queries"), py::arg("k"), py::arg("ef") = py::none(), py::arg("labels") = py::none(),
           py::arg("filter") = py::none(), py::arg("num_threads") = py::none(), py::arg("allowed") = py::none(),
           "allowed: None, a packed uint64 bitset over external ids (args.h, allowed_arg) or a CompiledFilter of "
           "this index.")
      .def("compile_filter",
           [](const mi::Hnsw& self, py::handle allowed_v, py::handle num_threads) {
             const auto allowed = allowed_arg(allowed_v);
             if (!allowed) throw py::type_error("compile_filter: allowed must be a packed uint64 bitset, not None");
             const int threads = threads_arg(num_threads);
             py::gil_scoped_release nogil;
             return self.compile_filter(allowed->words, allowed->n_words, threads);
           },
           py::arg("allowed"), py::arg("num_threads") = py::none(),
           "A CompiledFilter of a packed uint64 bitset over external ids, for search(..., allowed=it).")
      .def_property_readonly("epoch", &mi::Hnsw::epoch, "Changes with every add and deletion.")
      .def("train",
           [](mi::Hnsw& self, py::handle sample) {
             const Rows rows = rows_arg(sample, self.params().dim, "training vectors");
             const float* p = finite_rows(rows, self.params().dim, "training vectors");
             py::gil_scoped_release nogil;
             self.train(p, rows.n);
           })
      .def("mark_deleted",
           [](mi::Hnsw& self, py::handle id) {
             const uint64_t ext = id_arg(id);
             py::gil_scoped_release nogil;
             self.mark_deleted(ext);
           })
      .def("unmark_deleted",
           [](mi::Hnsw& self, py::handle id) {
             const uint64_t ext = id_arg(id);
             py::gil_scoped_release nogil;
             self.unmark_deleted(ext);
           })
      .def("resize",
           [](mi::Hnsw& self, py::handle new_size) {
             const size_t n = param_arg(new_size, "new_size");
             py::gil_scoped_release nogil;
             self.resize(n);
           })
      .def("set_allow_replace_deleted", &mi::Hnsw::set_allow_replace_deleted, py::arg("allow"),
           py::call_guard<py::gil_scoped_release>())
      .def("set_ef",
           [](mi::Hnsw& self, py::handle ef) {
             const long long v = int_arg(ef, "ef");
             if (v < 0) throw InputError("ef must be >= 0, got " + std::to_string(v));
             self.set_ef(std::max<size_t>(1, size_t(v)));  // 0 is accepted, as in hnswlib
           })
      .def_property_readonly("ef", &mi::Hnsw::ef)
      .def("set_entry_beam",
           [](mi::Hnsw& self, py::handle beam) {
             const long long v = int_arg(beam, "entry_beam");
             if (v < 0 || v > 4096) throw InputError("entry_beam must be in [0, 4096] (0: ef // 8), got " + std::to_string(v));
             self.set_entry_beam(size_t(v));
           })
      .def_property_readonly("entry_beam", &mi::Hnsw::entry_beam)
      .def("set_filter_exact_factor", &mi::Hnsw::set_filter_exact_factor)
      .def("set_scan_sketches", [](mi::Hnsw& self, bool on) {
        py::gil_scoped_release nogil;  // deriving them reads every code
        self.set_scan_sketches(on);
      })
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
        return vector_of_values(v);
      })
      .def("live_ids", [](const mi::Hnsw& self) {
        std::vector<uint64_t> live;
        {
          py::gil_scoped_release nogil;
          for (uint64_t ext : self.ids())
            if (!self.is_deleted_ext(ext)) live.push_back(ext);
        }
        return vector_of_values(live);
      })
      .def("get_items",
           [](const mi::Hnsw& self, py::handle ids) {
             const std::vector<uint64_t> ext = item_ids_arg(ids);
             const size_t n = ext.size(), dim = self.params().dim;
             py::array_t<float> out({n, dim});
             float* o = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               self.get_items(ext.data(), n, o);
             }
             return out;
           })
      .def("labels_of",
           [](const mi::Hnsw& self, py::handle id) {
             const uint64_t ext = id_arg(id);
             py::gil_scoped_release nogil;
             return self.labels_of(ext);
           })
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
           [](mi::FlatIndex& self, py::handle data, py::handle ids, py::handle labels, py::handle num_threads,
              bool update, bool reuse_deleted, std::optional<size_t> max_live) {
             const size_t dim = self.store().dim();
             const Rows rows = rows_arg(data, dim, "vectors");
             const float* p = finite_rows(rows, dim, "vectors");
             const auto ext = ids_arg(ids, rows.n);
             const auto row_labels = row_labels_arg(labels, rows.n);
             const int threads = threads_arg(num_threads);
             mi::FlatAddMode mode;
             mode.update = update;
             mode.reuse_deleted = reuse_deleted;
             if (max_live) mode.max_live = *max_live;
             py::gil_scoped_release nogil;
             self.add(p, rows.n, ext ? ext->data() : nullptr, row_labels ? &*row_labels : nullptr, threads, mode);
           },
           py::arg("data"), py::arg("ids") = py::none(), py::arg("labels") = py::none(),
           py::arg("num_threads") = py::none(), py::arg("update") = false, py::arg("reuse_deleted") = false,
           py::arg("max_live") = py::none(),
           "update: existing ids take the new rows; reuse_deleted: new ids take deleted slots; max_live: "
           "RuntimeError when more live elements would result (hnswlib's BFIndex).")
      .def("search",
           [](const mi::FlatIndex& self, py::handle queries, py::handle k_arg, py::handle labels, py::handle filter,
              py::handle num_threads, py::handle allowed_v) {
             const size_t dim = self.store().dim();
             const Rows rows = rows_arg(queries, dim, "queries");
             const size_t k = count_arg(k_arg, "k");
             const float* q = finite_rows(rows, dim, "queries");
             auto lq = label_query(labels);
             auto pred = predicate_of(self, filter_arg(filter));
             const int threads = threads_arg(num_threads);
             const auto allowed = allowed_arg(allowed_v);
             const mi::ExternalBits bits = external_bits(allowed);
             mi::check_k(k, self.count());  // before allocating the padded rows
             std::vector<int64_t> ids(mi::result_cells(rows.n, k));
             std::vector<float> scores(ids.size());
             {
               py::gil_scoped_release nogil;
               self.search(q, rows.n, k, lq ? &*lq : nullptr, pred ? &*pred : nullptr, threads, ids.data(),
                           scores.data(), allowed ? &bits : nullptr);
             }
             return result_arrays(rows.n, k, ids, scores);
           },
           py::arg("queries"), py::arg("k"), py::arg("labels") = py::none(), py::arg("filter") = py::none(),
           py::arg("num_threads") = py::none(), py::arg("allowed") = py::none(),
           "allowed: None or a packed uint64 bitset over external ids (args.h, allowed_arg).")
      .def("train",
           [](mi::FlatIndex& self, py::handle sample) {
             const Rows rows = rows_arg(sample, self.store().dim(), "training vectors");
             const float* p = finite_rows(rows, self.store().dim(), "training vectors");
             py::gil_scoped_release nogil;
             self.train(p, rows.n);
           })
      .def("mark_deleted",
           [](mi::FlatIndex& self, py::handle id) {
             const uint64_t ext = id_arg(id);
             py::gil_scoped_release nogil;
             self.mark_deleted(ext);
           })
      .def("unmark_deleted",
           [](mi::FlatIndex& self, py::handle id) {
             const uint64_t ext = id_arg(id);
             py::gil_scoped_release nogil;
             self.unmark_deleted(ext);
           })
      .def("__len__", &mi::FlatIndex::size)
      .def_property_readonly("space", [](const mi::FlatIndex& self) { return std::string(medretrieve::metric_name(self.store().space())); })
      .def_property_readonly("dtype", [](const mi::FlatIndex& self) { return std::string(mi::dtype_name(self.store().dtype())); })
      .def_property_readonly("dim", [](const mi::FlatIndex& self) { return self.store().dim(); })
      .def_property_readonly("count", &mi::FlatIndex::count)
      .def_property_readonly("read_only", &mi::FlatIndex::read_only)
      .def_property_readonly("declared_max", &mi::FlatIndex::declared_max)
      .def("set_declared_max", &mi::FlatIndex::set_declared_max, py::arg("n"))
      .def("contains", [](const mi::FlatIndex& self, py::handle id) { return self.contains(id_arg(id)); })
      .def("is_deleted", [](const mi::FlatIndex& self, py::handle id) { return self.is_deleted_ext(id_arg(id)); })
      .def("ids", [](const mi::FlatIndex& self) {
        std::vector<uint64_t> v;
        {
          py::gil_scoped_release nogil;
          v = self.ids();
        }
        return vector_of_values(v);
      })
      .def("get_items",
           [](const mi::FlatIndex& self, py::handle ids) {
             const std::vector<uint64_t> ext = item_ids_arg(ids);
             const size_t n = ext.size(), dim = self.store().dim();
             py::array_t<float> out({n, dim});
             float* o = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               self.get_items(ext.data(), n, o);
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
           [](const mi::FlatIndex& self, py::handle queries) -> py::tuple {
             const Rows rows = rows_arg(queries, self.store().dim(), "queries");
             const size_t nq = rows.n;
             const float* q = finite_rows(rows, self.store().dim(), "queries");
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
