// What a loaded index file must satisfy before any search may trust it. The
// envelope (sizes, bounds, checksum) is file_format.cpp's job; these checks
// cover the contents, for files however produced (a bug, a tool, a hostile
// edit that recomputed the checksum): a file failing them raises
// std::invalid_argument "<what> is corrupt (...)" naming the problem, and a
// file passing them cannot make a search or an add read out of bounds or
// return values computed from garbage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index/labels.h"
#include "index/vector_store.h"

namespace medretrieve::index {

// Every slab: only known header bits, a level-0 degree within link_slots,
// a scale in [0, kMaxScale], |aux| <= kMaxAux, int8 codes in [-127, 127] (the
// kernels' int32 sums rely on it) or float32 codes within +-kMaxComponent;
// centre and kept float32 originals within +-kMaxComponent. Then no distance
// a search computes is inf or NaN.
void check_store(const VectorStore& s, const std::string& what);

// The side label table against the slabs: an entry only for an element whose
// signature is not exact, carrying that signature and a label >= 64; an
// element with neither an exact signature nor an entry has no labels.
void check_side_labels(const VectorStore& s, const std::unordered_map<uint32_t, std::vector<uint32_t>>& side,
                       const std::string& what);

// The links of element `id` on `level` (an element's level >= level).
using LinksOf = std::function<std::pair<const uint32_t*, uint32_t>(uint32_t id, int level)>;

// The HNSW graph over n elements: degrees at most M (upper levels) or 2M
// (level 0), every link target stored and present on the link's level, the
// entry point holding the top level and max_level the highest level of all.
void check_graph(size_t n, size_t M, const std::vector<uint8_t>& levels, const LinksOf& links, uint32_t entry_point,
                 int32_t max_level, const std::string& what);

}  // namespace medretrieve::index
