// The versioned index file format (shared by Hnsw and FlatIndex).
//
//   "MDRIDX\0\0" | u32 version | u32 kind | u32 header bytes | u32 section count
//   | FileHeader (all parameters) | section table {u32 id, u32 0, u64 offset, u64 bytes}...
//   | sections, each 64-byte aligned (so a memory map can serve slabs in place)
//   | u64 checksum of every byte before it (4-lane word-at-a-time hash)
//
// Saving is atomic: write path.tmp.<pid>.<n>, fsync, rename over path, fsync
// the directory; the next save or load of path removes the temporaries of
// killed saves. Loading validates everything (the envelope here, the contents
// in load_checks.h) and throws std::invalid_argument / std::runtime_error
// naming the problem: a truncated, corrupt, foreign or newer file never crashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace medretrieve::index {

constexpr char kMagic[8] = {'M', 'D', 'R', 'I', 'D', 'X', 0, 0};
// 2: FileHeader gained prune_alpha (version 1 files were built with hnswlib's rule, alpha 1).
// 3: level-0 link ids are packed link_bits wide (vector_store.h); versions 1-2 hold u32 ids (link_bits 32).
constexpr uint32_t kFormatVersion = 3;
enum class FileKind : uint32_t { Hnsw = 0, Flat = 1 };
enum class SectionId : uint32_t { Centre = 1, Slabs = 2, Levels = 3, Upper = 4, ExtIds = 5, Labels = 6, Floats = 7 };

struct FileHeader {
  uint32_t space, dtype, dim, M;
  uint32_t ef_construction, ef, keep_float, centre_trained;
  uint32_t allow_replace_deleted, link_slots, stride, code_offset;
  uint32_t entry_point;
  int32_t max_level;
  uint64_t max_elements, count, seed;
  double filter_exact_factor;
  // Version 2 onwards (a version 1 header ends above; parse_file fills these in).
  float prune_alpha;
  uint32_t link_bits;  // version 3 onwards (reserved, 0, in version 2)
};
// The header size of each format version.
constexpr size_t kHeaderBytesV1 = offsetof(FileHeader, prune_alpha);
static_assert(kHeaderBytesV1 == 88 && sizeof(FileHeader) == 96, "FileHeader layout is part of the file format");

uint64_t checksum64(const char* data, size_t n);

// checksum64 fed piece by piece: update() with consecutive pieces, then value() == checksum64(all of them).
class Checksum64 {
 public:
  void update(const char* p, size_t n);
  uint64_t value() const;

 private:
  void block(const char* p);
  uint64_t h_[4] = {0x9E3779B185EBCA87ull + 0xC2B2AE3D27D4EB4Full, 0xC2B2AE3D27D4EB4Full, 0, ~0x9E3779B185EBCA87ull};
  char tail_[32];
  size_t tail_n_ = 0;
  size_t total_ = 0;
};

// A read-only memory map of a whole file (copy-on-write private mapping).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

struct Section {
  SectionId id;
  const char* data;
  size_t bytes;
};

// Serialises header + sections + checksum into one buffer.
std::vector<char> build_file(FileKind kind, const FileHeader& h, const std::vector<Section>& sections);
// The same bytes written atomically (as write_atomic) straight from the sections, a block at a time: no copy of
// the file in memory, so saving a large index does not need twice its size.
void write_file_atomic(const std::string& path, FileKind kind, const FileHeader& h, const std::vector<Section>& sections);
// Atomic write of a buffer to path (a symbolic link's target is replaced;
// anything but a regular file is refused with std::runtime_error).
void write_atomic(const std::string& path, const std::vector<char>& bytes);
// Removes what killed saves of `path` left behind: files of path's folder
// named <name>.tmp.<pid> or <name>.tmp.<pid>.<n> whose process is gone, that
// are regular files and that no live process holds locked. Never anything
// else (other names, live or own pids, links, folders); errors are ignored.
void remove_stale_temporaries(const std::string& path);
std::vector<char> read_whole_file(const std::string& path);

// An index file opened for loading (stale temporaries of `path` removed
// first): read whole, or memory-mapped (then `map` owns the bytes).
struct LoadedFile {
  std::vector<char> bytes;
  std::shared_ptr<MappedFile> map;
  const char* data() const { return map ? map->data() : bytes.data(); }
  size_t size() const { return map ? map->size() : bytes.size(); }
};
LoadedFile open_for_load(const std::string& path, bool mmap);

// A parsed (validated envelope) file view over caller-owned bytes.
struct ParsedFile {
  FileKind kind;
  FileHeader header;
  // Section bytes by id (nullptr / 0 when absent).
  const char* section(SectionId id, size_t* bytes) const;
  std::vector<std::pair<SectionId, std::pair<const char*, size_t>>> sections;
};
// Checks magic, version, sizes, section bounds and the checksum.
ParsedFile parse_file(const char* data, size_t size, const std::string& what);

}  // namespace medretrieve::index
