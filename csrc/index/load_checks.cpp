#include "index/load_checks.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace medretrieve::index {

namespace {

[[noreturn]] void corrupt(const std::string& what, const std::string& why) {
  throw std::invalid_argument(what + " is corrupt (" + why + ")");
}

std::string element(size_t id) { return "element " + std::to_string(id); }

// Components an add or a search would have accepted (vector_store.h).
void check_values(const float* v, size_t n, const std::string& what, const std::string& name) {
  for (size_t i = 0; i < n; ++i)
    if (!(std::fabs(v[i]) <= kMaxComponent)) corrupt(what, name + " holds a non-finite or too large value");
}

}  // namespace

void check_store(const VectorStore& s, const std::string& what) {
  constexpr uint32_t known = VectorStore::kCountMask | VectorStore::kDeletedBit | VectorStore::kLabelsExactBit;
  const size_t n = s.count(), dim = s.dim();
  check_values(s.centre(), dim, what, "the centre");
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = uint32_t(i);
    const uint32_t h = s.header(id);
    if (h & ~known) corrupt(what, element(i) + " has unknown flags");
    if (s.link_count0(id) > s.link_slots())
      corrupt(what, element(i) + " has " + std::to_string(s.link_count0(id)) + " links on level 0, more than " +
                        std::to_string(s.link_slots()));
    const float scale = s.scale(id), aux = s.aux(id);
    if (!(scale >= 0.f && scale <= kMaxScale)) corrupt(what, element(i) + " has scale " + std::to_string(scale));
    if (!(std::fabs(aux) <= kMaxAux)) corrupt(what, element(i) + " has a non-finite or too large norm term");
    if (s.dtype() == DType::Int8) {
      const int8_t* c = s.code_i8(id);
      if (std::find(c, c + dim, int8_t(-128)) != c + dim) corrupt(what, element(i) + " has an int8 code of -128");
    } else {
      check_values(s.code_f32(id), dim, what, element(i) + "'s vector");
    }
    if (const float* x = s.original(id)) check_values(x, dim, what, element(i) + "'s float32 original");
  }
}

void check_side_labels(const VectorStore& s, const std::unordered_map<uint32_t, std::vector<uint32_t>>& side,
                       const std::string& what) {
  for (const auto& [id, labels] : side) {
    if (s.labels_exact(id)) corrupt(what, "label table lists " + element(id) + ", whose labels are in its slab");
    if (labels_all_below_64(labels) || label_signature(labels) != s.signature(id))
      corrupt(what, "label table disagrees with " + element(id) + "'s slab");
  }
  for (size_t i = 0; i < s.count(); ++i) {
    const uint32_t id = uint32_t(i);
    if (!s.labels_exact(id) && s.signature(id) != 0 && side.find(id) == side.end())
      corrupt(what, element(i) + " has labels missing from the label table");
  }
}

void check_graph(size_t n, size_t M, const std::vector<uint8_t>& levels, const LinksOf& links, uint32_t entry_point,
                 int32_t max_level, const std::string& what) {
  if (n == 0) {
    if (entry_point != UINT32_MAX || max_level != -1) corrupt(what, "entry point of an empty index");
    return;
  }
  int top = 0;
  for (size_t i = 0; i < n; ++i) {
    const int level_i = levels[i];
    top = std::max(top, level_i);
    for (int level = 0; level <= level_i; ++level) {
      const auto [ids, count] = links(uint32_t(i), level);
      const size_t limit = level ? M : 2 * M;
      if (count > limit)
        corrupt(what, element(i) + " has " + std::to_string(count) + " links on level " + std::to_string(level) +
                          ", more than " + std::to_string(limit));
      for (uint32_t j = 0; j < count; ++j) {
        const uint32_t t = ids[j];
        if (t >= n)
          corrupt(what, "level-" + std::to_string(level) + " link of " + element(i) + " points at " + element(t) +
                            ", beyond the " + std::to_string(n) + " stored");
        if (levels[t] < level)
          corrupt(what, "level-" + std::to_string(level) + " link of " + element(i) + " points at " + element(t) +
                            ", which has no level " + std::to_string(level));
      }
    }
  }
  if (entry_point >= n) corrupt(what, "entry point " + std::to_string(entry_point) + " is not stored");
  if (max_level != top)
    corrupt(what, "max level " + std::to_string(max_level) + " is not the highest element level " +
                      std::to_string(top));
  if (levels[entry_point] != top)
    corrupt(what, "entry point " + std::to_string(entry_point) + " has level " +
                      std::to_string(levels[entry_point]) + ", below the max level " + std::to_string(top));
}

}  // namespace medretrieve::index
