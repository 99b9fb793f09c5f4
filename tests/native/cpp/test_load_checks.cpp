// The loader's content checks (index/load_checks.h): each damage below keeps
// the envelope valid (the checksum is recomputed), so only the content checks
// stand between the file and a search. Each must be refused, naming the
// problem; the clean file must load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "index/file_format.h"
#include "index/flat.h"
#include "index/hnsw.h"

using namespace medretrieve::index;

namespace {

constexpr size_t kPrefix = 8 + 16, kEntry = 24;

// A file's bytes with accessors for its header and sections.
struct Bytes {
  std::vector<char> b;
  FileHeader& header() { return *reinterpret_cast<FileHeader*>(b.data() + kPrefix); }
  uint32_t sections() const {
    uint32_t n;
    std::memcpy(&n, b.data() + 20, 4);
    return n;
  }
  char* entry(SectionId id) {
    for (uint32_t i = 0; i < sections(); ++i) {
      char* e = b.data() + kPrefix + sizeof(FileHeader) + i * kEntry;
      uint32_t sid;
      std::memcpy(&sid, e, 4);
      if (sid == uint32_t(id)) return e;
    }
    return nullptr;
  }
  char* section(SectionId id) {
    uint64_t off;
    std::memcpy(&off, entry(id) + 8, 8);
    return b.data() + off;
  }
  void reseal() {  // recompute the checksum over everything before it
    const uint64_t sum = checksum64(b.data(), b.size() - 8);
    std::memcpy(b.data() + b.size() - 8, &sum, 8);
  }
};

std::vector<float> rows(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(n * dim);
  for (float& v : x) v = nd(rng);
  return x;
}

constexpr size_t kDim = 8, kN = 300, kM = 4;

Bytes hnsw_file(DType dtype, bool keep_float) {
  HnswParams p;
  p.space = Space::L2;
  p.dtype = dtype;
  p.dim = kDim;
  p.max_elements = kN;
  p.M = kM;
  p.ef_construction = 40;
  p.keep_float = keep_float;
  Hnsw h(p);
  std::vector<std::vector<uint32_t>> labels(kN);
  for (size_t i = 0; i < kN; ++i) labels[i] = {uint32_t(i % 3), uint32_t(i % 2 ? 100 : 5)};
  const auto x = rows(kN, kDim, 1);
  h.add(x.data(), kN, nullptr, &labels, 1, false, false);
  h.mark_deleted(7);
  return {h.to_bytes()};
}

void expect_refused(Bytes bad, const std::string& why, bool flat = false) {
  bad.reseal();
  try {
    if (flat)
      FlatIndex::from_bytes(bad.b.data(), bad.b.size());
    else
      Hnsw::from_bytes(bad.b.data(), bad.b.size());
    ADD_FAILURE() << "accepted a file with: " << why;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

// Offset (in u32 words) of each element's upper-link blocks in the Upper section.
std::vector<size_t> upper_offsets(Bytes& f) {
  const uint8_t* levels = reinterpret_cast<const uint8_t*>(f.section(SectionId::Levels));
  std::vector<size_t> at(kN);
  size_t w = 0;
  for (size_t i = 0; i < kN; ++i) {
    at[i] = w;
    w += size_t(levels[i]) * (kM + 1);
  }
  return at;
}

size_t first_with_level(Bytes& f, int level, bool exact) {
  const uint8_t* levels = reinterpret_cast<const uint8_t*>(f.section(SectionId::Levels));
  for (size_t i = 0; i < kN; ++i)
    if (exact ? levels[i] == level : levels[i] >= level) return i;
  throw std::logic_error("no element at that level");
}

}  // namespace

TEST(LoadChecks, CleanFilesLoadEveryWay) {
  for (DType d : {DType::Float32, DType::Int8}) {
    Bytes f = hnsw_file(d, d == DType::Int8);
    EXPECT_NO_THROW(Hnsw::from_bytes(f.b.data(), f.b.size()));
  }
}

TEST(LoadChecks, GraphDamageIsNamed) {
  Bytes good = hnsw_file(DType::Int8, false);
  const size_t stride = good.header().stride;
  {  // an upper link to an element that has no such level
    Bytes f = good;
    const size_t i = first_with_level(f, 1, false), j = first_with_level(f, 0, true);
    uint32_t* block = reinterpret_cast<uint32_t*>(f.section(SectionId::Upper)) + upper_offsets(f)[i];
    block[0] = 1;
    block[1] = uint32_t(j);
    expect_refused(f, "which has no level 1");
  }
  {  // an upper degree above M
    Bytes f = good;
    uint32_t* block = reinterpret_cast<uint32_t*>(f.section(SectionId::Upper)) + upper_offsets(f)[first_with_level(f, 1, false)];
    block[0] = kM + 1;
    expect_refused(f, "links on level 1");
  }
  {  // a level-0 degree above 2M (the slab header's count bits)
    Bytes f = good;
    uint32_t* h = reinterpret_cast<uint32_t*>(f.section(SectionId::Slabs) + 3 * stride);
    *h = (*h & ~0xFFFFu) | uint32_t(2 * kM + 1);
    expect_refused(f, "links on level 0");
  }
  {  // a level-0 link beyond the stored elements
    Bytes f = good;
    uint32_t* h = reinterpret_cast<uint32_t*>(f.section(SectionId::Slabs) + 4 * stride);
    *h = (*h & ~0xFFFFu) | 1u;
    h[1] = uint32_t(kN);
    expect_refused(f, "beyond the 300 stored");
  }
  {  // the entry point does not hold the top level
    Bytes f = good;
    f.header().entry_point = uint32_t(first_with_level(f, 0, true));
    expect_refused(f, "entry point");
  }
  {  // max level below an element's level (entry point moved along, consistent with itself)
    Bytes f = good;
    f.header().entry_point = uint32_t(first_with_level(f, 0, true));
    f.header().max_level = 0;
    expect_refused(f, "max level 0 is not the highest");
  }
  {  // an empty index with an entry point
    HnswParams p;
    p.dim = kDim;
    p.max_elements = 4;
    Bytes f{Hnsw(p).to_bytes()};
    f.header().entry_point = 0;
    expect_refused(f, "entry point of an empty index");
  }
}

TEST(LoadChecks, SlabIdAndLabelDamageIsNamed) {
  Bytes good = hnsw_file(DType::Int8, true);
  const size_t stride = good.header().stride, code = good.header().code_offset;
  // the u64 label signature follows the packed level-0 link slots, 8-aligned
  const size_t sig = (4 + (2 * kM * good.header().link_bits + 7) / 8 + 7) / 8 * 8;
  auto slab = [&](Bytes& f, size_t i) { return f.section(SectionId::Slabs) + i * stride; };
  {
    Bytes f = good;
    const float nan = NAN;
    std::memcpy(slab(f, 5) + sig + 8, &nan, 4);
    expect_refused(f, "scale");
  }
  {
    Bytes f = good;
    slab(f, 6)[code + 2] = char(-128);
    expect_refused(f, "int8 code of -128");
  }
  {
    Bytes f = good;
    reinterpret_cast<float*>(f.section(SectionId::Centre))[1] = INFINITY;
    expect_refused(f, "centre");
  }
  {
    Bytes f = good;
    reinterpret_cast<float*>(f.section(SectionId::Floats))[kDim * 9 + 3] = NAN;
    expect_refused(f, "float32 original");
  }
  {
    Bytes f = good;
    *reinterpret_cast<uint32_t*>(slab(f, 8)) |= 1u << 20;
    expect_refused(f, "unknown flags");
  }
  {
    Bytes f = good;
    reinterpret_cast<uint64_t*>(f.section(SectionId::ExtIds))[3] = 2;
    expect_refused(f, "duplicate ids");
  }
  {
    Bytes f = good;
    reinterpret_cast<uint64_t*>(f.section(SectionId::ExtIds))[3] = uint64_t(1) << 63;
    expect_refused(f, "above 2**63 - 1");
  }
  {  // element 1 has labels {1, 100}: only in the side table; drop the side table's knowledge of it
    Bytes f = good;
    uint32_t* h = reinterpret_cast<uint32_t*>(slab(f, 0));
    ASSERT_TRUE(*h & (1u << 17));  // element 0 {0, 5} is exact
    *reinterpret_cast<uint64_t*>(slab(f, 0) + sig) |= uint64_t(1) << 40;  // still exact: no side entry needed
    EXPECT_NO_THROW({
      Bytes ok = f;
      ok.reseal();
      Hnsw::from_bytes(ok.b.data(), ok.b.size());
    });
    *h &= ~(1u << 17);  // no longer exact, non-zero signature, no side entry
    expect_refused(f, "labels missing from the label table");
  }
  {
    Bytes f = good;
    *reinterpret_cast<uint32_t*>(slab(f, 1)) |= 1u << 17;  // claims exact while the side table lists it
    expect_refused(f, "whose labels are in its slab");
  }
  {
    Bytes f = good;
    f.header().keep_float = 2;
    expect_refused(f, "flags");
  }
  {  // a section moved off its 64-byte alignment
    Bytes f = good;
    char* e = f.entry(SectionId::Levels);
    uint64_t off, bytes;
    std::memcpy(&off, e + 8, 8);
    std::memcpy(&bytes, e + 16, 8);
    off += 4;
    bytes -= bytes >= 4 ? 4 : bytes;
    std::memcpy(e + 8, &off, 8);
    std::memcpy(e + 16, &bytes, 8);
    expect_refused(f, "misaligned");
  }
}

TEST(LoadChecks, FlatDamageIsNamed) {
  FlatIndex idx(Space::IP, DType::Float32, kDim);
  const auto x = rows(20, kDim, 2);
  idx.add(x.data(), 20, nullptr, nullptr, 1);
  Bytes good{idx.to_bytes()};
  const size_t stride = good.header().stride, code = good.header().code_offset;
  {
    Bytes f = good;
    reinterpret_cast<float*>(f.section(SectionId::Slabs) + 4 * stride + code)[2] = NAN;
    expect_refused(f, "element 4's vector", true);
  }
  {
    Bytes f = good;
    *reinterpret_cast<uint32_t*>(f.section(SectionId::Slabs) + 2 * stride) |= 3u;  // a flat slab has no links
    expect_refused(f, "links on level 0", true);
  }
}

TEST(LoadChecks, AHeaderCountAloneNeverSizesAnAllocation) {
  // Found by fuzzing: a header claiming 2^31 elements was reserved for (~200 GB)
  // before the sections were checked against that count.
  Bytes h = hnsw_file(DType::Int8, false);
  h.header().count = h.header().max_elements = uint64_t(1) << 31;
  expect_refused(h, "link id width");  // 16-bit ids cannot address that many
  {  // ids wide enough, layout to match: the sections must still hold the count
    VectorStore wide(Space::IP, DType::Int8, kDim, 2 * kM, false);
    wide.use_link_bits(32);
    h.header().link_bits = 32;
    h.header().stride = uint32_t(wide.stride());
    h.header().code_offset = uint32_t(wide.code_offset());
    expect_refused(h, "section has the wrong size");
  }
  FlatIndex idx(Space::IP, DType::Float32, kDim);
  const auto x = rows(4, kDim, 3);
  idx.add(x.data(), 4, nullptr, nullptr, 1);
  Bytes f{idx.to_bytes()};
  f.header().count = f.header().max_elements = uint64_t(1) << 31;
  expect_refused(f, "section has the wrong size", true);
}

TEST(LoadChecks, MemoryMappedLoadsRunTheSameChecks) {
  Bytes f = hnsw_file(DType::Float32, false);
  const size_t i = first_with_level(f, 1, false), j = first_with_level(f, 0, true);
  uint32_t* block = reinterpret_cast<uint32_t*>(f.section(SectionId::Upper)) + upper_offsets(f)[i];
  block[0] = 1;
  block[1] = uint32_t(j);
  f.reseal();
  const std::string path = "/tmp/medretrieve_load_checks_" + std::to_string(::getpid()) + ".mdr";
  std::ofstream(path, std::ios::binary).write(f.b.data(), std::streamsize(f.b.size()));
  EXPECT_THROW(Hnsw::load(path, true), std::invalid_argument);
  EXPECT_THROW(Hnsw::load(path, false), std::invalid_argument);
  ::unlink(path.c_str());
}

TEST(FileFormat, ChecksumFedInPiecesEqualsTheOneShotChecksum) {
  std::mt19937 rng(5);
  std::vector<char> data(1000);
  for (char& c : data) c = char(rng());
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(1000)}) {
    for (size_t piece : {size_t(1), size_t(7), size_t(32), size_t(45), size_t(1000)}) {
      Checksum64 c;
      for (size_t at = 0; at < n; at += piece) c.update(data.data() + at, std::min(piece, n - at));
      EXPECT_EQ(c.value(), checksum64(data.data(), n)) << n << " bytes in pieces of " << piece;
    }
  }
}

TEST(FileFormat, StreamedSaveWritesTheSnapshotBytes) {
  HnswParams p;
  p.dim = 12;
  p.M = 6;
  p.max_elements = 300;
  p.dtype = DType::Int8;
  Hnsw h(p);
  std::mt19937 rng(9);
  std::normal_distribution<float> g;
  std::vector<float> x(300 * 12);
  for (float& v : x) v = g(rng);
  std::vector<uint64_t> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 1000 + i;
  h.add(x.data(), 300, ids.data(), nullptr, 1, false, false);
  const std::string path = ::testing::TempDir() + "streamed_" + std::to_string(::getpid()) + ".mdr";
  h.save(path, /*snapshot=*/false);
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> streamed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(streamed, h.to_bytes());
  EXPECT_EQ(Hnsw::load(path, true)->count(), 300u);
  std::remove(path.c_str());
}
