// Exact (brute-force) k-NN over float32 or int8 vectors, with labels and
// deletions. Uses the same VectorStore (no link area) and the same exact_topk
// as the HNSW's filtered fallback. Multithreaded over queries. The CUDA back
// end (FlatIndex(device="cuda") in Python) searches a device copy of
// pack_live() with queries from pack_queries().
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "common/shared_mutex.h"
#include "index/filter.h"
#include "index/labels.h"
#include "index/vector_store.h"

namespace medretrieve::index {

class MappedFile;

// Live rows in internal order, packed for an accelerator: external ids and
// either int8 codes [n, dim] + per-row scales (int8) or float rows (float32).
struct PackedRows {
  std::vector<uint64_t> ids;
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<float> rows;
};

// Queries prepared exactly as search() prepares them. int8: codes [nq, dim]
// and scales s_q such that the CPU score is
//   ip:  offset + s_q * s_x * dot(code_q, code_x)
//   l2:  offset + 2 s_q s_x dot(code_q, code_x) - s_q^2 |code_q|^2 - s_x^2 |code_x|^2
// (the accelerator computes the part after the offset). float32: the
// prepared rows (normalised for cosine), offsets 0.
struct PackedQueries {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<float> offsets;
  std::vector<float> rows;
};

// How add() treats ids already stored and deleted slots. The defaults are the
// native API's; hnswlib's BFIndex (Python) sets all three.
struct FlatAddMode {
  // An id already stored (live or deleted) takes the new vector, and the new
  // labels when given, and is live again; otherwise it is std::invalid_argument.
  bool update = false;
  // New ids take the slots of deleted elements before the store grows (the
  // deleted ids are gone then: hnswlib's BFIndex removes on delete).
  bool reuse_deleted = false;
  // std::runtime_error when the call would leave more live elements.
  size_t max_live = SIZE_MAX;
};

class FlatIndex {
 public:
  FlatIndex(Space space, DType dtype, size_t dim);

  // ids == null: ids size()..; an existing id raises std::invalid_argument
  // unless mode.update. Capacity grows as needed. int8: the first batch
  // trains the centre. Every check runs before anything changes.
  void add(const float* data, size_t n, const uint64_t* ids, const std::vector<std::vector<uint32_t>>* labels,
           int num_threads, const FlatAddMode& mode = {});
  // allowed: null, or the external ids results may have (compiled to slots once per call).
  void search(const float* queries, size_t nq, size_t k, const LabelQuery* labels, const IdPredicate* predicate,
              int num_threads, int64_t* out_ids, float* out_scores, const ExternalBits* allowed = nullptr) const;
  // One prepared query, internal ids + distances, closest first.
  std::vector<Candidate> search_prepared(const QueryCtx& ctx, size_t k, const LabelQuery* labels,
                                         const IdPredicate* predicate, const AllowedRows* rows = nullptr) const;
  void train(const float* sample, size_t n);
  void mark_deleted(uint64_t ext);
  void unmark_deleted(uint64_t ext);
  void get_items(const uint64_t* ids, size_t n, float* out) const;
  std::vector<uint64_t> ids() const;
  bool contains(uint64_t ext) const;
  // Throws std::runtime_error "Label not found" for an unknown id.
  bool is_deleted_ext(uint64_t ext) const;
  // The element limit a caller declared (hnswlib's BFIndex max_elements): not
  // enforced here (FlatAddMode::max_live is), saved as the file header's
  // max_elements (at least the count) and read back by load.
  void set_declared_max(size_t n) { declared_max_ = n; }
  size_t declared_max() const { return declared_max_; }
  PackedRows pack_live() const;
  PackedQueries pack_queries(const float* queries, size_t nq) const;
  size_t size() const { return store_.count() - store_.deleted_count(); }  // live elements
  size_t count() const { return store_.count(); }
  size_t memory_bytes() const { return store_.memory_bytes() + labels_.memory_bytes(); }
  const VectorStore& store() const { return store_; }
  SharedMutex& mutex() const { return mu_; }
  bool read_only() const { return store_.read_only(); }

  void save(const std::string& path) const;
  std::vector<char> to_bytes() const;
  static std::unique_ptr<FlatIndex> load(const std::string& path, bool mmap);
  static std::unique_ptr<FlatIndex> from_bytes(const char* data, size_t size);

 private:
  // Internal ids of deleted elements, at most `limit` of them (a scan: only
  // reuse_deleted adds with deletions present pay it).
  std::vector<uint32_t> deleted_slots(size_t limit) const;
  VectorStore store_;
  LabelTable labels_;
  mutable SharedMutex mu_;
  std::shared_ptr<MappedFile> mapping_;
  std::atomic<size_t> declared_max_{0};
  friend class FlatSerializer;
};

}  // namespace medretrieve::index
