// libFuzzer target: the index-file loaders on arbitrary bytes.
//
// Built only with -DMEDRETRIEVE_FUZZ=ON (clang, -fsanitize=fuzzer,address,
// undefined), against a core compiled with MEDRETRIEVE_FUZZING so that
// random bytes get past the checksum to the content checks behind it.
//
// Each input is loaded as an HNSW index and as a flat index, from a copy and
// from a memory map (a memfd), and must either raise std::invalid_argument /
// std::runtime_error or load. A loaded index must then survive searches
// (labels, predicate, per-query ef, search_mmr), and a copy-loaded one adds,
// deletions and a save/load round trip (which must succeed: what was accepted
// and then changed through the API is valid). Copy and mmap loads must agree.
// Anything else -- a sanitizer report, another exception, a disagreement --
// is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusion/search_mmr.h"
#include "index/file_format.h"
#include "index/flat.h"
#include "index/hnsw.h"

using namespace medretrieve::index;

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_load finding: %s\n", what);
  std::abort();
}

// Headers asking for a capacity far beyond their element count are skipped:
// a copy load honours the capacity (as hnswlib does), so such a file
// allocates by design, and libFuzzer's malloc limit would report that.
bool skip(const uint8_t* data, size_t size) {
  constexpr size_t kPrefix = 8 + 16;
  if (size < kPrefix + sizeof(FileHeader)) return false;
  FileHeader h;
  std::memcpy(&h, data + kPrefix, sizeof h);
  return h.max_elements > h.count + (uint64_t(1) << 16);
}

std::vector<float> queries(size_t dim, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> q(n * dim);
  for (float& v : q) v = nd(rng);
  return q;
}

// Kind of outcome, to compare the copy and the mmap load.
enum class Outcome { Loaded, Rejected, NoMemory };

// Outcome counts over the run, printed at exit (for bench/RESULTS.md).
struct Tally {
  size_t n[3] = {0, 0, 0};
  ~Tally() {
    std::fprintf(stderr, "fuzz_load outcomes: loaded %zu, rejected with a clean error %zu, out of memory %zu\n", n[0],
                 n[1], n[2]);
  }
} tally;

template <typename Fn>
Outcome run(Fn&& fn) {
  try {
    fn();
    return Outcome::Loaded;
  } catch (const std::invalid_argument&) {
    return Outcome::Rejected;
  } catch (const std::bad_alloc&) {
    return Outcome::NoMemory;
  } catch (const std::length_error&) {
    return Outcome::NoMemory;
  } catch (const std::runtime_error&) {
    return Outcome::Rejected;
  } catch (...) {
    finding("an exception of an unexpected type escaped");
  }
}

template <typename Fn>
Outcome guarded(Fn&& fn) {
  const Outcome o = run(std::forward<Fn>(fn));
  ++tally.n[int(o)];
  return o;
}

void exercise(const Hnsw& h) {
  const size_t dim = h.params().dim, nq = 3, k = 4;
  if (dim > 4096) return;  // searches over huge rows add time, not coverage
  const std::vector<float> q = queries(dim, nq, uint32_t(h.count()));
  std::vector<int64_t> ids(nq * k);
  std::vector<float> scores(nq * k);
  h.search(q.data(), nq, k, nullptr, 0, nullptr, nullptr, 1, ids.data(), scores.data());
  const size_t efs[3] = {1, 7, 64};
  const LabelQuery lq = LabelQuery::make({0, 1, 70});
  const IdPredicate odd = [](uint32_t id) { return id % 2 == 1; };
  h.search(q.data(), nq, k, efs, 3, &lq, &odd, 1, ids.data(), scores.data());
  for (size_t i = 0; i < nq * k; ++i)
    if (ids[i] < -1 || (ids[i] >= 0 && !h.contains(uint64_t(ids[i])))) finding("search returned an unknown id");
  medretrieve::fusion::search_mmr(h, q.data(), 3, 8, 0.5f, 16, &lq);
}

void exercise(const FlatIndex& f) {
  const size_t dim = f.store().dim(), nq = 2, k = 3;
  if (dim > 4096) return;
  const std::vector<float> q = queries(dim, nq, uint32_t(f.count()));
  std::vector<int64_t> ids(nq * k);
  std::vector<float> scores(nq * k);
  const LabelQuery lq = LabelQuery::make({2, 64});
  f.search(q.data(), nq, k, nullptr, nullptr, 1, ids.data(), scores.data());
  f.search(q.data(), nq, k, &lq, nullptr, 1, ids.data(), scores.data());
}

// Mutations through the API on a copy load, then a round trip that must load.
template <typename Index>
void mutate_and_round_trip(Index& idx) {
  const size_t dim = idx.store().dim();
  if (dim > 4096 || idx.read_only()) return;
  const std::vector<float> x = queries(dim, 2, 7);
  const uint64_t fresh[2] = {uint64_t(1) << 40, (uint64_t(1) << 40) + 1};
  const std::vector<std::vector<uint32_t>> labels = {{1, 90}, {}};
  try {
    if constexpr (std::is_same_v<Index, Hnsw>) {
      if (idx.count() + 2 > idx.capacity()) idx.resize(idx.count() + 2);
      idx.add(x.data(), 2, fresh, &labels, 1, false, false);
      idx.add(x.data(), 1, fresh, nullptr, 1, true, false);  // an update re-links
    } else {
      idx.add(x.data(), 2, fresh, &labels, 1);
    }
    idx.mark_deleted(fresh[0]);
  } catch (const std::invalid_argument&) {  // e.g. a zero row in cosine space, an id already there
  } catch (const std::runtime_error&) {
  }
  exercise(idx);
  const std::vector<char> bytes = idx.to_bytes();
  try {
    Index::from_bytes(bytes.data(), bytes.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "round trip: %s\n", e.what());
    finding("an accepted index, changed through the API, saved a file that does not load");
  }
}

int memfd() {
  static const int fd = ::memfd_create("fuzz_load", 0);
  return fd;
}

std::string memfd_path(const uint8_t* data, size_t size) {
  const int fd = memfd();
  if (fd < 0 || ::ftruncate(fd, 0) != 0 || (size && ::pwrite(fd, data, size, 0) != ssize_t(size))) finding("memfd");
  return "/proc/self/fd/" + std::to_string(fd);
}

template <typename Index>
void load_both_ways(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  const Outcome copy = guarded([&] {
    auto idx = Index::from_bytes(bytes, size);
    exercise(*idx);
    mutate_and_round_trip(*idx);
  });
  if (size == 0) return;  // an empty file cannot be mapped: MappedFile refuses it first
  const std::string path = memfd_path(data, size);
  const Outcome mapped = guarded([&] {
    auto idx = Index::load(path, true);
    exercise(*idx);
  });
  if (copy != Outcome::NoMemory && mapped != Outcome::NoMemory && copy != mapped)
    finding("the copy and the memory-mapped load disagree");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (skip(data, size)) return 0;
  load_both_ways<Hnsw>(data, size);
  load_both_ways<FlatIndex>(data, size);
  return 0;
}
