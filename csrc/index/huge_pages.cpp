#include "index/huge_pages.h"

#include <cstring>
#include <new>

#include <sys/mman.h>

namespace medretrieve::index {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}  // namespace

char* alloc_zeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size);
  if (!p) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  if (align == kHugePage) ::madvise(p, size, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, size);
  return static_cast<char*>(p);
}

}  // namespace medretrieve::index
