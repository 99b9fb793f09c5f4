// Exact (brute-force) k-NN over float32 or int8 vectors, with labels and
// deletions. Uses the same VectorStore (no link area) and the same exact_topk
// as the HNSW's filtered fallback. Multithreaded over queries. The CUDA back
// end (FlatIndex(device="cuda") in Python) searches a device copy of
// pack_live() with queries from pack_queries().
#pragma once

#include <cstddef>
#include <cstdint>
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

class FlatIndex {
 public:
  FlatIndex(Space space, DType dtype, size_t dim);

  // ids == null: ids size()..; existing ids raise std::invalid_argument.
  // Capacity grows as needed. int8: the first batch trains the centre.
  void add(const float* data, size_t n, const uint64_t* ids, const std::vector<std::vector<uint32_t>>* labels,
           int num_threads);
  void search(const float* queries, size_t nq, size_t k, const LabelQuery* labels, const IdPredicate* predicate,
              int num_threads, int64_t* out_ids, float* out_scores) const;
  // One prepared query, internal ids + distances, closest first.
  std::vector<Candidate> search_prepared(const QueryCtx& ctx, size_t k, const LabelQuery* labels,
                                         const IdPredicate* predicate) const;
  void train(const float* sample, size_t n);
  void mark_deleted(uint64_t ext);
  void unmark_deleted(uint64_t ext);
  void get_items(const uint64_t* ids, size_t n, float* out) const;
  std::vector<uint64_t> ids() const;
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
  VectorStore store_;
  LabelTable labels_;
  mutable SharedMutex mu_;
  std::shared_ptr<MappedFile> mapping_;
  friend class FlatSerializer;
};

}  // namespace medretrieve::index
