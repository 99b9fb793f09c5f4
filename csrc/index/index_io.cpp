// Hnsw and FlatIndex persistence on top of file_format.h: which sections each
// kind writes, and the validation that makes a hostile file fail cleanly.
#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "index/file_format.h"
#include "index/flat.h"
#include "index/hnsw.h"
#include "index/load_checks.h"

namespace medretrieve::index {

namespace {

std::vector<char> encode_side_labels(const LabelTable& table) {
  std::vector<char> out;
  auto put = [&out](uint32_t v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + 4);
  };
  const auto entries = table.side_entries();
  put(uint32_t(entries.size()));
  for (const auto& [id, labels] : entries) {
    put(id);
    put(uint32_t(labels.size()));
    for (uint32_t l : labels) put(l);
  }
  return out;
}

std::unordered_map<uint32_t, std::vector<uint32_t>> decode_side_labels(const char* p, size_t n, size_t count,
                                                                       const std::string& what) {
  std::unordered_map<uint32_t, std::vector<uint32_t>> out;
  size_t pos = 0;
  auto get = [&](uint32_t& v) {
    if (pos + 4 > n) throw std::invalid_argument(what + " is corrupt (label table)");
    std::memcpy(&v, p + pos, 4);
    pos += 4;
  };
  if (n == 0) return out;
  uint32_t entries;
  get(entries);
  for (uint32_t e = 0; e < entries; ++e) {
    uint32_t id, len;
    get(id);
    get(len);
    if (id >= count || len > (n - pos) / 4) throw std::invalid_argument(what + " is corrupt (label table)");
    std::vector<uint32_t> labels(len);
    for (uint32_t& l : labels) get(l);
    out[id] = normalise_labels(std::move(labels));
  }
  return out;
}

// Rebuilds posting lists (and the side table) from the slabs' signatures.
void rebuild_labels(const VectorStore& store, LabelTable& table,
                    const std::unordered_map<uint32_t, std::vector<uint32_t>>& side) {
  table.clear();
  std::vector<uint32_t> labels;
  for (size_t i = 0; i < store.count(); ++i) {
    const uint32_t id = uint32_t(i);
    labels.clear();
    if (store.labels_exact(id)) {
      for (uint64_t sig = store.signature(id); sig; sig &= sig - 1) labels.push_back(uint32_t(__builtin_ctzll(sig)));
    } else if (auto it = side.find(id); it != side.end()) {
      labels = it->second;
    }
    if (!labels.empty()) table.assign(id, {}, labels);
  }
}

FileHeader store_header(const VectorStore& s) {
  FileHeader h{};
  h.space = uint32_t(s.space());
  h.dtype = uint32_t(s.dtype());
  h.dim = uint32_t(s.dim());
  h.keep_float = s.keep_float();
  h.centre_trained = s.trained();
  h.link_slots = uint32_t(s.link_slots());
  h.link_bits = s.link_bits();
  h.stride = uint32_t(s.stride());
  h.code_offset = uint32_t(s.code_offset());
  h.count = s.count();
  return h;
}

std::vector<Section> store_sections(const VectorStore& s, const std::vector<uint64_t>& ext,
                                    const std::vector<char>& side) {
  std::vector<Section> out;
  out.push_back({SectionId::Centre, reinterpret_cast<const char*>(s.centre()), s.dim() * sizeof(float)});
  out.push_back({SectionId::Slabs, s.slab_data(), s.count() * s.stride()});
  out.push_back({SectionId::ExtIds, reinterpret_cast<const char*>(ext.data()), ext.size() * sizeof(uint64_t)});
  out.push_back({SectionId::Labels, side.data(), side.size()});
  if (s.keep_float())
    out.push_back({SectionId::Floats, reinterpret_cast<const char*>(s.float_data()), s.count() * s.dim() * sizeof(float)});
  return out;
}

void check_header(const FileHeader& h, const std::string& what) {
  if (!is_metric(h.space) || h.dtype > 1 || h.dim == 0 || h.dim > (1u << 20))
    throw std::invalid_argument(what + " is corrupt (space, dtype or dim)");
  if (h.count > h.max_elements && h.max_elements) throw std::invalid_argument(what + " is corrupt (count)");
  // Internal ids are u32 (UINT32_MAX marks "none"): neither count nor capacity may reach it.
  if (h.count >= UINT32_MAX || h.max_elements >= UINT32_MAX) throw std::invalid_argument(what + " is corrupt (count)");
  if (h.keep_float > 1 || h.centre_trained > 1 || h.allow_replace_deleted > 1 ||
      (h.keep_float && DType(h.dtype) != DType::Int8))
    throw std::invalid_argument(what + " is corrupt (flags)");
}

const char* need(const ParsedFile& f, SectionId id, size_t expected, const std::string& what, const char* name) {
  size_t bytes;
  const char* p = f.section(id, &bytes);
  if (!p && expected) throw std::invalid_argument(what + " is corrupt (missing " + name + " section)");
  if (bytes != expected) throw std::invalid_argument(what + " is corrupt (" + name + " section has the wrong size)");
  return p;
}

// Fills a store from a parsed file: copies (mutable) or points into the
// mapping. make_room(count) runs once the sections are known to hold count
// elements, before anything is copied: a header's count alone never sizes an
// allocation.
void fill_store(VectorStore& s, const ParsedFile& f, const std::string& what, bool in_place,
                const std::function<void(size_t)>& make_room) {
  const FileHeader& h = f.header;
  // ids as wide as the saved capacity needs (so make_room keeps the layout)
  if (h.link_bits < VectorStore::kMinLinkBits || h.link_bits > 32 ||
      (s.link_slots() && h.link_bits < VectorStore::link_bits_for(size_t(std::max(h.max_elements, h.count)))))
    throw std::invalid_argument(what + " is corrupt (link id width)");
  s.use_link_bits(h.link_bits);
  if (h.stride != s.stride() || h.code_offset != s.code_offset() || h.link_slots != s.link_slots())
    throw std::invalid_argument(what + " is corrupt (slab layout does not match its parameters)");
  const size_t n = h.count;
  const char* centre = need(f, SectionId::Centre, h.dim * sizeof(float), what, "centre");
  const char* slabs = need(f, SectionId::Slabs, n * s.stride(), what, "slab");
  const char* ext = need(f, SectionId::ExtIds, n * sizeof(uint64_t), what, "id");
  const char* floats = s.keep_float() ? need(f, SectionId::Floats, n * h.dim * sizeof(float), what, "float") : nullptr;
  if (!in_place) make_room(n);
  if (s.stride() != h.stride) throw std::logic_error(what + ": the slab layout changed while making room");
  std::memcpy(s.centre_mut().data(), centre, h.dim * sizeof(float));
  s.set_trained(h.centre_trained != 0 || s.dtype() == DType::Float32);
  std::vector<uint64_t> ids(n);
  if (n) std::memcpy(ids.data(), ext, n * sizeof(uint64_t));
  {
    std::unordered_set<uint64_t> seen(ids.begin(), ids.end());
    if (seen.size() != n) throw std::invalid_argument(what + " is corrupt (duplicate ids)");
  }
  for (uint64_t id : ids)  // files are checked against the same id rule as adds
    if (id > kMaxExtId)
      throw std::invalid_argument(what + " holds id " + std::to_string(id) + ", above 2**63 - 1 (ids must fit in int64)");
  if (in_place) {
    s.attach_readonly(const_cast<char*>(slabs), reinterpret_cast<float*>(const_cast<char*>(floats)), n, ids.data());
  } else {
    if (n) std::memcpy(s.slab_data(), slabs, n * s.stride());
    if (floats && n) std::memcpy(s.float_data(), floats, n * h.dim * sizeof(float));
    s.restore(n, ids.data());
  }
  check_store(s, what);
}

// The side label table, checked against the slabs, then the posting lists.
void load_labels(const ParsedFile& f, const VectorStore& s, LabelTable& table, const std::string& what) {
  size_t side_bytes;
  const char* side = f.section(SectionId::Labels, &side_bytes);
  const auto decoded = decode_side_labels(side, side_bytes, s.count(), what);
  check_side_labels(s, decoded, what);
  rebuild_labels(s, table, decoded);
}

}  // namespace

// ---------------------------------------------------------------------------
// Hnsw

// What a saved Hnsw file holds, gathered under the index's lock; the sections point into this object (and the
// index's own memory), so it is neither copied nor moved.
struct HnswImage {
  FileHeader header;
  std::vector<uint64_t> ext;
  std::vector<uint32_t> upper;
  std::vector<char> side;
  std::vector<Section> sections;
};

namespace {

std::unique_ptr<Hnsw> hnsw_from_parsed(const ParsedFile& f, const std::string& what, std::shared_ptr<MappedFile> map);

}  // namespace

class HnswSerializer {
 public:
  // The caller holds the index's lock.
  static void image(const Hnsw& x, HnswImage& out) {
    FileHeader& h = out.header;
    h = store_header(x.store_);
    h.M = uint32_t(x.p_.M);
    h.ef_construction = uint32_t(x.p_.ef_construction);
    h.ef = uint32_t(x.ef_.load());
    h.allow_replace_deleted = x.p_.allow_replace_deleted;
    h.max_elements = x.capacity();
    h.seed = x.p_.seed;
    h.entry_point = x.entry_point();
    h.max_level = x.max_level();
    h.filter_exact_factor = x.filter_exact_factor_;
    h.prune_alpha = x.p_.prune_alpha;
    const size_t n = x.count();
    out.ext.resize(n);
    for (size_t i = 0; i < n; ++i) out.ext[i] = x.store_.ext_id(uint32_t(i));
    for (size_t i = 0; i < n; ++i)
      if (x.levels_[i]) out.upper.insert(out.upper.end(), x.upper_[i], x.upper_[i] + size_t(x.levels_[i]) * (x.p_.M + 1));
    out.side = encode_side_labels(x.labels_);
    out.sections = store_sections(x.store_, out.ext, out.side);
    out.sections.push_back({SectionId::Levels, reinterpret_cast<const char*>(x.levels_.data()), n});
    out.sections.push_back(
        {SectionId::Upper, reinterpret_cast<const char*>(out.upper.data()), out.upper.size() * sizeof(uint32_t)});
  }

  static std::unique_ptr<Hnsw> build(const ParsedFile& f, const std::string& what, std::shared_ptr<MappedFile> map) {
    const FileHeader& h = f.header;
    if (f.kind != FileKind::Hnsw) throw std::invalid_argument(what + " holds a FlatIndex, not an HNSW Index");
    check_header(h, what);
    if (h.M < 2 || h.M > 2048 || h.link_slots != 2 * h.M || h.ef_construction == 0)
      throw std::invalid_argument(what + " is corrupt (M)");
    HnswParams p;
    p.space = Space(h.space);
    p.dtype = DType(h.dtype);
    p.dim = h.dim;
    p.M = h.M;
    p.ef_construction = h.ef_construction;
    p.seed = h.seed;
    p.keep_float = h.keep_float;
    p.allow_replace_deleted = h.allow_replace_deleted;
    if (!(h.prune_alpha >= HnswParams::kMinPruneAlpha && h.prune_alpha <= HnswParams::kMaxPruneAlpha))
      throw std::invalid_argument(what + " is corrupt (prune_alpha)");
    p.prune_alpha = h.prune_alpha;
    const bool in_place = map != nullptr;
    p.max_elements = 0;  // capacity comes once the sections confirm the count
    auto idx = std::make_unique<Hnsw>(p);
    idx->set_ef(h.ef);
    if (h.filter_exact_factor >= 0 && h.filter_exact_factor < 1e9) idx->filter_exact_factor_ = h.filter_exact_factor;
    const size_t n = h.count;
    Hnsw& g = *idx;
    fill_store(idx->store_, f, what, in_place, [&g, &h](size_t count) {
      g.resize(std::max<size_t>(size_t(h.max_elements), count));  // the saved capacity, as hnswlib keeps it
    });
    const char* levels = need(f, SectionId::Levels, n, what, "level");
    size_t upper_words = 0;
    for (size_t i = 0; i < n; ++i) {
      if (uint8_t(levels[i]) > Hnsw::kMaxLevel) throw std::invalid_argument(what + " is corrupt (level)");
      upper_words += size_t(uint8_t(levels[i])) * (h.M + 1);
    }
    const char* upper = need(f, SectionId::Upper, upper_words * sizeof(uint32_t), what, "upper link");
    if (in_place) {
      idx->mapping_ = map;
      idx->upper_.assign(n, nullptr);
      idx->levels_.assign(n, 0);
      idx->visited_.resize(n);
    }
    const char* up = upper;  // in place: 64-byte aligned (parse_file checks section offsets)
    for (size_t i = 0; i < n; ++i) {
      const int level = uint8_t(levels[i]);
      const size_t bytes = size_t(level) * (h.M + 1) * sizeof(uint32_t);
      if (in_place) {
        idx->levels_[i] = uint8_t(level);
        idx->upper_[i] = level ? reinterpret_cast<uint32_t*>(const_cast<char*>(up)) : nullptr;
      } else {
        idx->allocate_upper(uint32_t(i), level);
        if (bytes) std::memcpy(idx->upper_[i], up, bytes);
      }
      up += bytes;
    }
    std::vector<uint32_t> ids;
    check_graph(n, h.M, idx->levels_, [&g, &ids](uint32_t id, int level) {
      if (level > 0) {  // read in place: check_graph checks the count before it reads an id
        const Hnsw::Links l = g.upper_links(id, level);
        return std::make_pair(l.ids, l.n);
      }
      g.read_links(id, 0, ids);  // fill_store checked every level-0 count (check_store)
      return std::make_pair(static_cast<const uint32_t*>(ids.data()), uint32_t(ids.size()));
    }, h.entry_point, h.max_level, what);
    idx->ep_state_.store(n ? pack(h.entry_point, h.max_level) : pack(Hnsw::kNone, -1));
    load_labels(f, idx->store_, idx->labels_, what);
    if (p.allow_replace_deleted)
      for (size_t i = 0; i < n; ++i)
        if (idx->store_.is_deleted(uint32_t(i))) idx->deleted_slots_.push_back(uint32_t(i));
    return idx;
  }
  static uint64_t pack(uint32_t ep, int level) { return (uint64_t(uint32_t(level)) << 32) | ep; }
};

std::vector<char> Hnsw::to_bytes() const {
  std::unique_lock<SharedMutex> g(mu_);
  HnswImage img;
  HnswSerializer::image(*this, img);
  return build_file(FileKind::Hnsw, img.header, img.sections);
}

void Hnsw::save(const std::string& path, bool snapshot) const {
  if (snapshot) {  // copy under the lock, write after it: searches wait only for the copy
    write_atomic(path, to_bytes());
    return;
  }
  std::unique_lock<SharedMutex> g(mu_);  // written straight from the index: no second copy in memory
  HnswImage img;
  HnswSerializer::image(*this, img);
  write_file_atomic(path, FileKind::Hnsw, img.header, img.sections);
}


namespace {
std::unique_ptr<Hnsw> hnsw_from_parsed(const ParsedFile& f, const std::string& what, std::shared_ptr<MappedFile> map) {
  return HnswSerializer::build(f, what, std::move(map));
}
}  // namespace

std::unique_ptr<Hnsw> Hnsw::load(const std::string& path, bool mmap) {
  const std::string what = "index file '" + path + "'";
  const LoadedFile in = open_for_load(path, mmap);
  return hnsw_from_parsed(parse_file(in.data(), in.size(), what), what, in.map);
}

std::unique_ptr<Hnsw> Hnsw::from_bytes(const char* data, size_t size) {
  return hnsw_from_parsed(parse_file(data, size, "serialized index"), "serialized index", nullptr);
}

// ---------------------------------------------------------------------------
// FlatIndex

std::vector<char> FlatIndex::to_bytes() const {
  // Shared is enough: every FlatIndex writer (add, deletions, train) holds the
  // lock exclusively, so this is a consistent snapshot, taken beside searches.
  std::shared_lock<SharedMutex> g(mu_);
  FileHeader h = store_header(store_);
  // A declared limit (BFIndex) survives a save; the store itself can hold at most 2^32 - 2 elements.
  h.max_elements = std::max(store_.count(), std::min<size_t>(declared_max_, UINT32_MAX - 1));
  h.entry_point = Hnsw::kNone;
  h.max_level = -1;
  const size_t n = store_.count();
  std::vector<uint64_t> ext(n);
  for (size_t i = 0; i < n; ++i) ext[i] = store_.ext_id(uint32_t(i));
  const std::vector<char> side = encode_side_labels(labels_);
  return build_file(FileKind::Flat, h, store_sections(store_, ext, side));
}

void FlatIndex::save(const std::string& path) const { write_atomic(path, to_bytes()); }

class FlatSerializer {
 public:
  static std::unique_ptr<FlatIndex> build(const ParsedFile& f, const std::string& what,
                                          std::shared_ptr<MappedFile> map) {
    const FileHeader& h = f.header;
    if (f.kind != FileKind::Flat) throw std::invalid_argument(what + " holds an HNSW Index, not a FlatIndex");
    check_header(h, what);
    auto idx = std::make_unique<FlatIndex>(Space(h.space), DType(h.dtype), h.dim);
    VectorStore& store = idx->store_;
    fill_store(store, f, what, map != nullptr, [&store](size_t count) { store.reserve(count); });
    idx->mapping_ = map;
    idx->declared_max_ = size_t(h.max_elements);
    load_labels(f, idx->store_, idx->labels_, what);
    return idx;
  }
};

std::unique_ptr<FlatIndex> FlatIndex::load(const std::string& path, bool mmap) {
  const std::string what = "index file '" + path + "'";
  const LoadedFile in = open_for_load(path, mmap);
  return FlatSerializer::build(parse_file(in.data(), in.size(), what), what, in.map);
}

std::unique_ptr<FlatIndex> FlatIndex::from_bytes(const char* data, size_t size) {
  return FlatSerializer::build(parse_file(data, size, "serialized index"), "serialized index", nullptr);
}

}  // namespace medretrieve::index
