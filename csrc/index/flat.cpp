#include "index/flat.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "common/parallel.h"
#include "kernels/quantizer.h"

namespace medretrieve::index {

FlatIndex::FlatIndex(Space space, DType dtype, size_t dim) : store_(space, dtype, dim, 0, false) {}

void FlatIndex::train(const float* sample, size_t n) {
  std::unique_lock<SharedMutex> g(mu_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot train");
  if (store_.count() > 0) throw std::runtime_error("train() must be called before the first add");
  store_.train(sample, n);
}

void FlatIndex::add(const float* data, size_t n, const uint64_t* ids, const std::vector<std::vector<uint32_t>>* labels,
                    int num_threads, const FlatAddMode& mode) {
  if (n == 0) return;
  if (labels && labels->size() != n) throw std::invalid_argument("labels must have one entry per row");
  std::unique_lock<SharedMutex> g(mu_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot add items");
  const size_t dim = store_.dim();
  std::vector<float> buf;
  for (size_t i = 0; i < n; ++i) store_.prepare_input(data + i * dim, buf);  // rejects zero cosine rows
  if (ids) check_ext_ids(ids, n);

  // Plan every row before changing anything: its slot, and whether it is new.
  constexpr uint32_t kNew = UINT32_MAX;
  std::vector<uint64_t> ext(n);
  std::vector<uint32_t> slot(n, kNew);
  std::unordered_set<uint64_t> seen;
  size_t n_new = 0, revived = 0;
  for (size_t i = 0; i < n; ++i) {
    ext[i] = ids ? ids[i] : uint64_t(store_.count() + i);
    if (!seen.insert(ext[i]).second) throw std::invalid_argument("duplicate id " + std::to_string(ext[i]) + " in one add call");
    uint32_t existing;
    if (!store_.find(ext[i], existing)) {
      ++n_new;
      continue;
    }
    if (!mode.update) throw std::invalid_argument("id " + std::to_string(ext[i]) + " already exists");
    slot[i] = existing;
    revived += store_.is_deleted(existing);
  }
  if (size() + n_new + revived > mode.max_live)
    throw std::runtime_error("The number of elements exceeds the specified limit");
  std::vector<uint32_t> reuse;
  if (mode.reuse_deleted && n_new && store_.deleted_count() > revived) {
    reuse = deleted_slots(n_new + revived);
    // Slots this call revives under their own id are not free.
    reuse.erase(std::remove_if(reuse.begin(), reuse.end(),
                               [&](uint32_t id) { return seen.count(store_.ext_id(id)) != 0; }),
                reuse.end());
    if (reuse.size() > n_new) reuse.resize(n_new);
  }
  if (!store_.trained()) {
    const size_t rows = n >= VectorStore::kMinTrainRows ? std::min(n, VectorStore::kTrainRows) : 0;
    store_.train(data, rows);
  }
  // Appended rows first: allocation is the one step left that can fail.
  const size_t n_append = n_new - reuse.size();
  if (n_append) {
    std::vector<uint64_t> append_ext;
    append_ext.reserve(n_append);
    size_t seen_new = 0;
    for (size_t i = 0; i < n; ++i)
      if (slot[i] == kNew && seen_new++ >= reuse.size()) append_ext.push_back(ext[i]);
    if (store_.count() + n_append > store_.capacity())
      store_.reserve(std::max(store_.count() + n_append, store_.capacity() * 2));
    uint32_t next = store_.allocate(append_ext.data(), n_append);
    seen_new = 0;
    for (size_t i = 0; i < n; ++i)
      if (slot[i] == kNew && seen_new++ >= reuse.size()) slot[i] = next++;
  }
  size_t next_reuse = 0;
  std::vector<bool> clear_labels(n, false);  // a reused slot does not keep the deleted element's labels
  for (size_t i = 0; i < n; ++i) {
    if (slot[i] != kNew) continue;
    slot[i] = reuse[next_reuse++];
    store_.rebind(slot[i], ext[i]);
    clear_labels[i] = true;
  }
  for (size_t i = 0; i < n; ++i)
    if (store_.set_deleted(slot[i], false)) store_.note_deleted_delta(-1);
  parallel_for(0, n, num_threads, [&](size_t i, size_t) {
    std::vector<float> local;
    store_.encode(slot[i], store_.prepare_input(data + i * dim, local));
    if (labels)
      assign_labels(store_, labels_, slot[i], normalise_labels((*labels)[i]));
    else if (clear_labels[i])
      assign_labels(store_, labels_, slot[i], {});
  });
}

std::vector<uint32_t> FlatIndex::deleted_slots(size_t limit) const {
  std::vector<uint32_t> out;
  for (uint32_t id = 0; id < store_.count() && out.size() < limit; ++id)
    if (store_.is_deleted(id)) out.push_back(id);
  return out;
}

std::vector<Candidate> FlatIndex::search_prepared(const QueryCtx& ctx, size_t k, const LabelQuery* lq,
                                                  const IdPredicate* predicate, const AllowedRows* rows) const {
  ElementFilter filter{&store_, &labels_, lq, predicate, rows};
  if (rows && rows->count == 0) return {};
  // A sparse row filter lists its rows (AllowedRows::listed): score only them; the filter checks the labels.
  if (rows && !rows->listed.empty())
    return exact_topk(store_, ctx, filter, rows->listed.data(), rows->listed.size(), k, false);
  if (lq) {
    std::vector<uint32_t> ids;
    labels_.collect(*lq, ids);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return exact_topk(store_, ctx, filter, ids.data(), ids.size(), k, false);
  }
  return exact_topk(store_, ctx, filter, nullptr, store_.count(), k, false);
}

void FlatIndex::search(const float* queries, size_t nq, size_t k, const LabelQuery* lq, const IdPredicate* predicate,
                       int num_threads, int64_t* out_ids, float* out_scores, const ExternalBits* allowed) const {
  std::shared_lock<SharedMutex> g(mu_);
  check_k(k, store_.count());
  std::optional<AllowedRows> rows;
  if (allowed) rows = AllowedRows::from_external(store_, allowed->words, allowed->n_words);  // once for the batch
  const AllowedRows* rows_p = rows ? &*rows : nullptr;
  const size_t dim = store_.dim();
  // A thread only when it gets kScanPerThread row dimensions to score (~1 ms at
  // 16-d): starting one costs tens of us, and a busy machine delays it more, so
  // a 10-ms batch on all cores ran slower than on one.
  // (In double: nq x rows x dim may not fit in 64 bits.)
  constexpr double kScanPerThread = double(size_t(1) << 22);
  const double shares = double(nq) * double(store_.count()) * double(dim) / kScanPerThread;
  const size_t threads = std::max<size_t>(1, size_t(std::min(double(resolve_threads(num_threads)), shares)));
  if (lq || (rows && !rows->listed.empty())) {  // a list of rows per query: no shared scan order
    parallel_for(0, nq, (long long)threads, [&](size_t i, size_t) {
      QueryCtx ctx;
      store_.prepare_query(queries + i * dim, ctx);
      write_row(store_, search_prepared(ctx, k, lq, predicate, rows_p), k, out_ids + i * k, out_scores + i * k);
    });
    return;
  }
  // Tiles of up to kTile queries scan the rows together (exact_topk_scan), as
  // many tiles as there are threads at least.
  constexpr size_t kTile = 16;
  const size_t tile = std::clamp<size_t>((nq + threads - 1) / threads, 1, kTile);
  const ElementFilter filter{&store_, &labels_, nullptr, predicate, rows_p};
  parallel_for(0, (nq + tile - 1) / tile, (long long)threads, [&](size_t t, size_t) {
    const size_t q0 = t * tile, len = std::min(tile, nq - q0);
    std::vector<QueryCtx> ctxs(len);
    for (size_t i = 0; i < len; ++i) store_.prepare_query(queries + (q0 + i) * dim, ctxs[i]);
    std::vector<Candidate> found[kTile];
    exact_topk_scan(store_, ctxs.data(), len, filter, k, found, threads == 1);
    for (size_t i = 0; i < len; ++i) write_row(store_, found[i], k, out_ids + (q0 + i) * k, out_scores + (q0 + i) * k);
  });
}

void FlatIndex::mark_deleted(uint64_t ext) {
  std::unique_lock<SharedMutex> g(mu_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot delete items");
  uint32_t id;
  if (!store_.find(ext, id)) throw std::runtime_error("Label not found");
  if (store_.set_deleted(id, true)) throw std::runtime_error("The requested to delete element is already deleted");
  store_.note_deleted_delta(1);
}

void FlatIndex::unmark_deleted(uint64_t ext) {
  std::unique_lock<SharedMutex> g(mu_);
  if (read_only()) throw std::runtime_error("read-only memory-mapped index: cannot undelete items");
  uint32_t id;
  if (!store_.find(ext, id)) throw std::runtime_error("Label not found");
  if (!store_.set_deleted(id, false)) throw std::runtime_error("The requested to undelete element is not deleted");
  store_.note_deleted_delta(-1);
}

void FlatIndex::get_items(const uint64_t* ids, size_t n, float* out) const {
  std::shared_lock<SharedMutex> g(mu_);
  for (size_t i = 0; i < n; ++i) {
    uint32_t id;
    if (!store_.find(ids[i], id) || store_.is_deleted(id)) throw std::runtime_error("Label not found");
    store_.decode(id, out + i * store_.dim());
  }
}

std::vector<uint64_t> FlatIndex::ids() const {
  std::shared_lock<SharedMutex> g(mu_);
  std::vector<uint64_t> out(store_.count());
  for (size_t i = 0; i < out.size(); ++i) out[i] = store_.ext_id(uint32_t(i));
  return out;
}

bool FlatIndex::contains(uint64_t ext) const {
  std::shared_lock<SharedMutex> g(mu_);
  uint32_t id;
  return store_.find(ext, id);
}

bool FlatIndex::is_deleted_ext(uint64_t ext) const {
  std::shared_lock<SharedMutex> g(mu_);
  uint32_t id;
  if (!store_.find(ext, id)) throw std::runtime_error("Label not found");
  return store_.is_deleted(id);
}

PackedRows FlatIndex::pack_live() const {
  std::shared_lock<SharedMutex> g(mu_);
  const size_t dim = store_.dim(), n = store_.count();
  const bool int8 = store_.dtype() == DType::Int8;
  PackedRows out;
  out.ids.reserve(size());
  for (uint32_t id = 0; id < n; ++id) {
    if (store_.is_deleted(id)) continue;
    out.ids.push_back(store_.ext_id(id));
    if (int8) {
      const int8_t* c = store_.code_i8(id);
      out.codes.insert(out.codes.end(), c, c + dim);
      out.scales.push_back(store_.scale(id));
    } else {
      const float* r = store_.code_f32(id);
      out.rows.insert(out.rows.end(), r, r + dim);
    }
  }
  return out;
}

PackedQueries FlatIndex::pack_queries(const float* queries, size_t nq) const {
  std::shared_lock<SharedMutex> g(mu_);
  const size_t dim = store_.dim();
  const bool int8 = store_.dtype() == DType::Int8, l2 = store_.space() == Space::L2;
  PackedQueries out;
  out.offsets.assign(nq, 0.f);
  for (size_t i = 0; i < nq; ++i) {
    QueryCtx ctx;
    store_.prepare_query(queries + i * dim, ctx);
    if (!int8) {
      out.rows.insert(out.rows.end(), ctx.vec.begin(), ctx.vec.end());
      continue;
    }
    // prepare_query: score = -distance = -(base + factor * s_x * dot) (+ -aux for l2), factor = -s_q (ip) or
    // -2 s_q (l2). For l2 the accelerator also subtracts s_q^2 |code_q|^2, which the offset adds back.
    const float sq = l2 ? -ctx.factor / 2.f : -ctx.factor;
    out.codes.insert(out.codes.end(), ctx.code.begin(), ctx.code.end());
    out.scales.push_back(sq);
    out.offsets[i] = l2 ? kernels::code_norm2(ctx.code.data(), sq, dim) - ctx.base : -ctx.base;
  }
  return out;
}

}  // namespace medretrieve::index
