// Zeroed arrays for data searches read at random places (slabs, sketches).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace medretrieve::index {

// Graph search reads vectors at random places: with 4 KiB pages nearly every
// read misses the TLB as well as the cache. Arrays of 2 MiB and more are
// aligned to 2 MiB and offered to transparent huge pages (a hint: where THP is
// off, nothing changes). Freed with std::free; throws std::bad_alloc.
char* alloc_zeroed(size_t bytes);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace medretrieve::index
