#include "index/file_format.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>

namespace medretrieve::index {

namespace {
constexpr size_t kPrefixBytes = 8 + 4 * 4;
constexpr size_t kSectionEntryBytes = 4 + 4 + 8 + 8;
size_t align64(size_t x) { return (x + 63) / 64 * 64; }
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
std::string sys_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}
}  // namespace

namespace {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;
}  // namespace

void Checksum64::block(const char* p) {
  for (int l = 0; l < 4; ++l) {
    uint64_t w;
    std::memcpy(&w, p + 8 * l, 8);
    h_[l] = rotl(h_[l] + w * kP2, 31) * kP1;
  }
}

void Checksum64::update(const char* p, size_t n) {
  total_ += n;
  if (tail_n_) {  // complete the pending block first
    const size_t take = std::min(n, 32 - tail_n_);
    std::memcpy(tail_ + tail_n_, p, take);
    tail_n_ += take;
    p += take;
    n -= take;
    if (tail_n_ < 32) return;
    block(tail_);
    tail_n_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) block(p);
  std::memcpy(tail_, p, n);
  tail_n_ = n;
}

uint64_t Checksum64::value() const {
  uint64_t acc = rotl(h_[0], 1) + rotl(h_[1], 7) + rotl(h_[2], 12) + rotl(h_[3], 18) + total_;
  for (size_t i = 0; i < tail_n_; ++i) acc = rotl(acc ^ (uint64_t(uint8_t(tail_[i])) * kP3), 11) * kP1;
  acc ^= acc >> 33;
  acc *= kP2;
  acc ^= acc >> 29;
  return acc;
}

uint64_t checksum64(const char* p, size_t n) {
  Checksum64 c;
  c.update(p, n);
  return c.value();
}

MappedFile::MappedFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(sys_error("cannot open index file", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw std::runtime_error(sys_error("cannot stat index file", path));
  }
  size_ = size_t(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    throw std::invalid_argument("index file '" + path + "' is empty");
  }
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw std::runtime_error(sys_error("cannot memory-map index file", path));
  data_ = static_cast<char*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

namespace {

// Where build_file puts everything: the head (prefix, header, section table, padded to the first section) and
// each section's offset; the file ends with the u64 checksum at `end`.
struct Layout {
  std::vector<char> head;
  std::vector<size_t> offsets;
  size_t end = 0;
};

Layout layout(FileKind kind, const FileHeader& h, const std::vector<Section>& sections) {
  Layout out;
  const size_t table = kPrefixBytes + sizeof(FileHeader);
  size_t offset = align64(table + sections.size() * kSectionEntryBytes);
  out.head.assign(offset, 0);
  for (const Section& s : sections) {
    out.offsets.push_back(offset);
    offset = align64(offset + s.bytes);
  }
  out.end = offset;
  char* p = out.head.data();
  std::memcpy(p, kMagic, 8);
  const uint32_t prefix[4] = {kFormatVersion, uint32_t(kind), uint32_t(sizeof(FileHeader)), uint32_t(sections.size())};
  std::memcpy(p + 8, prefix, sizeof prefix);
  std::memcpy(p + kPrefixBytes, &h, sizeof h);
  for (size_t i = 0; i < sections.size(); ++i) {
    char* e = p + table + i * kSectionEntryBytes;
    const uint32_t id = uint32_t(sections[i].id), zero = 0;
    const uint64_t off = out.offsets[i], bytes = sections[i].bytes;
    std::memcpy(e, &id, 4);
    std::memcpy(e + 4, &zero, 4);
    std::memcpy(e + 8, &off, 8);
    std::memcpy(e + 16, &bytes, 8);
  }
  return out;
}

}  // namespace

std::vector<char> build_file(FileKind kind, const FileHeader& h, const std::vector<Section>& sections) {
  const Layout l = layout(kind, h, sections);
  std::vector<char> out(l.end + 8, 0);
  char* p = out.data();
  std::memcpy(p, l.head.data(), l.head.size());
  for (size_t i = 0; i < sections.size(); ++i)
    if (sections[i].bytes) std::memcpy(p + l.offsets[i], sections[i].data, sections[i].bytes);
  const uint64_t sum = checksum64(p, l.end);
  std::memcpy(p + l.end, &sum, 8);
  return out;
}

namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool all_digits(const std::string& s, size_t from, size_t to) {
  if (from >= to) return false;
  for (size_t i = from; i < to; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// The pid in a temporary's name "<base>.tmp.<pid>" or "<base>.tmp.<pid>.<n>", or 0 when it is not one.
pid_t temporary_owner(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp.";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return 0;
  const size_t start = prefix.size(), dot = name.find('.', start);
  const size_t end = dot == std::string::npos ? name.size() : dot;
  if (!all_digits(name, start, end) || end - start > 9) return 0;
  if (dot != std::string::npos && !all_digits(name, dot + 1, name.size())) return 0;
  return pid_t(std::stol(name.substr(start, end - start)));
}

// The file a save of `path` replaces: a symbolic link is followed (the link
// stays, its target is replaced); anything but a regular file is refused, so
// a save never swaps a device, FIFO or directory for a file.
std::string save_target(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return path;  // a new file
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    char* real = ::realpath(path.c_str(), nullptr);
    if (!real) throw std::runtime_error(sys_error("cannot resolve the link", path));
    target = real;
    std::free(real);
    if (::stat(target.c_str(), &st) != 0) return target;
  }
  if (!S_ISREG(st.st_mode)) throw std::runtime_error("refusing to save over '" + path + "': not a regular file");
  return target;
}

}  // namespace

void remove_stale_temporaries(const std::string& path) {
  const std::string dir = dir_of(path), base = base_of(path);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;  // best effort: an unreadable folder only keeps its leftovers
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const pid_t pid = temporary_owner(name, base);
    // Our own pid: another thread of this process may be saving right now.
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal): keep
    stale.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const std::string& file : stale) {
    // Only a regular file that no live process holds locked (a writer in
    // another pid namespace holds its flock while writing), and still the
    // same file when removed.
    const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st, now;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::lstat(file.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
      ::unlink(file.c_str());
    ::close(fd);
  }
}

namespace {

using Sink = std::function<void(const char*, size_t)>;

// Writes the bytes `emit` passes to its sink into a temporary beside `requested`, fsyncs and renames it over the
// target (see write_atomic in the header); the temporary is removed when anything fails.
void write_atomic_with(const std::string& requested, const std::function<void(const Sink&)>& emit) {
  const std::string path = save_target(requested);
  remove_stale_temporaries(path);
  // One temporary per save, even for threads of one process saving the same
  // target at once: <path>.tmp.<pid>.<sequence>, created exclusively and
  // flock'ed while written, so no cleaner (in any pid namespace) takes it.
  static std::atomic<uint64_t> sequence{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(sequence.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(sys_error("cannot create", tmp));
  ::flock(fd, LOCK_EX | LOCK_NB);  // fresh file: nobody else can hold it
  auto fail = [&](const std::string& msg) {
    ::unlink(tmp.c_str());
    ::close(fd);
    throw std::runtime_error(msg);
  };
  const Sink sink = [&](const char* data, size_t n) {
    size_t done = 0;
    while (done < n) {
      ssize_t w = ::write(fd, data + done, std::min(n - done, size_t(1) << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(sys_error("cannot write", tmp));
      }
      done += size_t(w);
    }
  };
  try {
    emit(sink);
  } catch (...) {
    ::unlink(tmp.c_str());
    ::close(fd);
    throw;
  }
  if (::fsync(fd) != 0) fail(sys_error("cannot flush", tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(sys_error("cannot rename temporary file onto", path));
  ::close(fd);  // after the rename: the lock covered the whole life of the temporary
  int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: the rename is durable once the directory is
    ::close(dfd);
  }
}

}  // namespace

void write_atomic(const std::string& requested, const std::vector<char>& bytes) {
  write_atomic_with(requested, [&](const Sink& sink) { sink(bytes.data(), bytes.size()); });
}

void write_file_atomic(const std::string& path, FileKind kind, const FileHeader& h,
                       const std::vector<Section>& sections) {
  const Layout l = layout(kind, h, sections);
  write_atomic_with(path, [&](const Sink& sink) {
    Checksum64 sum;
    auto put = [&](const char* p, size_t n) {
      sum.update(p, n);
      sink(p, n);
    };
    static const char zeros[64] = {};
    put(l.head.data(), l.head.size());
    size_t at = l.head.size();
    for (size_t i = 0; i < sections.size(); ++i) {
      for (size_t done = 0; done < sections[i].bytes;) {  // blocks of 64 MiB: the page cache, not a copy
        const size_t n = std::min(sections[i].bytes - done, size_t(64) << 20);
        put(sections[i].data + done, n);
        done += n;
      }
      at += sections[i].bytes;
      const size_t pad = align64(at) - at;
      put(zeros, pad);
      at += pad;
    }
    const uint64_t value = sum.value();
    sink(reinterpret_cast<const char*>(&value), 8);
  });
}

std::vector<char> read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("cannot open index file '" + path + "'");
  const std::streamsize n = f.tellg();
  if (n < 0) throw std::runtime_error("cannot read index file '" + path + "'");
  std::vector<char> out(static_cast<size_t>(n));
  f.seekg(0);
  if (n && !f.read(out.data(), n)) throw std::runtime_error("cannot read index file '" + path + "'");
  return out;
}

LoadedFile open_for_load(const std::string& path, bool mmap) {
  remove_stale_temporaries(path);
  LoadedFile f;
  if (mmap)
    f.map = std::make_shared<MappedFile>(path);
  else
    f.bytes = read_whole_file(path);
  return f;
}

const char* ParsedFile::section(SectionId id, size_t* bytes) const {
  for (const auto& s : sections)
    if (s.first == id) {
      *bytes = s.second.second;
      return s.second.first;
    }
  *bytes = 0;
  return nullptr;
}

ParsedFile parse_file(const char* data, size_t size, const std::string& what) {
  if (size < 8 || std::memcmp(data, kMagic, 8) != 0)
    throw std::invalid_argument(what + " is not a medretrieve index file (bad magic)");
  if (size < kPrefixBytes) throw std::invalid_argument(what + " is truncated (no header)");
  uint32_t prefix[4];
  std::memcpy(prefix, data + 8, sizeof prefix);
  if (prefix[0] > kFormatVersion)
    throw std::invalid_argument(what + " was written by a newer medretrieve (format version " +
                                std::to_string(prefix[0]) + " > " + std::to_string(kFormatVersion) + ")");
  if (prefix[0] == 0) throw std::invalid_argument(what + " has an invalid format version 0");
  if (prefix[1] > 1) throw std::invalid_argument(what + " has an unknown index kind");
  const size_t header_bytes = prefix[0] == 1 ? kHeaderBytesV1 : sizeof(FileHeader);
  if (prefix[2] != header_bytes) throw std::invalid_argument(what + " has an unexpected header size");
  if (prefix[3] > 64) throw std::invalid_argument(what + " has an implausible section count");
  const size_t table = kPrefixBytes + header_bytes;
  const size_t body = table + prefix[3] * kSectionEntryBytes;
  if (size < body + 8) throw std::invalid_argument(what + " is truncated (header or section table)");
  ParsedFile out;
  out.kind = FileKind(prefix[1]);
  out.header = FileHeader{};
  out.header.prune_alpha = 1.f;  // what a version 1 file was built with
  std::memcpy(&out.header, data + kPrefixBytes, header_bytes);
  if (prefix[0] < 3) out.header.link_bits = 32;  // u32 level-0 ids
  size_t end = body;
  for (uint32_t i = 0; i < prefix[3]; ++i) {
    const char* e = data + table + i * kSectionEntryBytes;
    uint32_t id;
    uint64_t off, bytes;
    std::memcpy(&id, e, 4);
    std::memcpy(&off, e + 8, 8);
    std::memcpy(&bytes, e + 16, 8);
    if (off < body || off > size || bytes > size - off)
      throw std::invalid_argument(what + " is truncated or corrupt (section " + std::to_string(id) + " out of bounds)");
    // A memory-mapped load reads u32 / f32 / u64 in place: sections keep build_file's 64-byte alignment.
    if (off % 64) throw std::invalid_argument(what + " is corrupt (section " + std::to_string(id) + " misaligned)");
    out.sections.push_back({SectionId(id), {data + off, size_t(bytes)}});
    end = std::max(end, size_t(align64(off + bytes)));
  }
  if (end + 8 > size) throw std::invalid_argument(what + " is truncated");
  if (end + 8 < size) throw std::invalid_argument(what + " has trailing bytes (corrupt)");
#if !defined(MEDRETRIEVE_FUZZING)
  uint64_t stored;
  std::memcpy(&stored, data + end, 8);
  if (stored != checksum64(data, end)) throw std::invalid_argument(what + " is corrupt (checksum mismatch)");
#else
  // Fuzzing builds only (never a user build: CMake defines it for the fuzz
  // targets alone): random bytes reach the content checks behind the checksum.
#endif
  return out;
}

}  // namespace medretrieve::index
