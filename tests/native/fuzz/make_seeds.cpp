// Writes the fuzz target's seed corpus: small valid index files of every
// kind the format holds (HNSW and flat; l2 / ip / cosine; float32 / int8,
// with and without kept float32 originals; labels below and above 64;
// deletions; an empty index). Usage: make_seeds <folder>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "index/flat.h"
#include "index/hnsw.h"

using namespace medretrieve::index;

namespace {

std::vector<float> rows(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(n * dim);
  for (float& v : x) v = nd(rng) + 0.3f;
  return x;
}

std::vector<std::vector<uint32_t>> labels(size_t n) {
  std::vector<std::vector<uint32_t>> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = i % 3 ? std::vector<uint32_t>{uint32_t(i % 4)} : std::vector<uint32_t>{1, 70};
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <folder>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const size_t n = 24, dim = 6;
  const auto x = rows(n, dim, 1);
  const auto lab = labels(n);
  int written = 0;
  for (Space s : {Space::L2, Space::IP, Space::Cosine})
    for (DType d : {DType::Float32, DType::Int8}) {
      const std::string name = std::string(medretrieve::metric_name(s)) + "-" + dtype_name(d);
      for (bool keep : {false, true}) {
        if (keep && d == DType::Float32) continue;
        HnswParams p;
        p.space = s;
        p.dtype = d;
        p.dim = dim;
        p.max_elements = n + 4;
        p.M = 3;
        p.ef_construction = 16;
        p.keep_float = keep;
        p.allow_replace_deleted = keep;
        Hnsw h(p);
        h.add(x.data(), n, nullptr, &lab, 1, false, false);
        h.mark_deleted(5);
        h.save(dir + "/hnsw-" + name + (keep ? "-keep" : "") + ".mdr");
        ++written;
      }
      FlatIndex f(s, d, dim);
      f.add(x.data(), n, nullptr, &lab, 1);
      f.mark_deleted(3);
      f.save(dir + "/flat-" + name + ".mdr");
      ++written;
    }
  HnswParams empty;
  empty.dim = dim;
  empty.max_elements = 2;
  Hnsw(empty).save(dir + "/hnsw-empty.mdr");
  FlatIndex(Space::IP, DType::Int8, dim).save(dir + "/flat-empty.mdr");
  std::printf("%d seed files in %s\n", written + 2, dir.c_str());
  return 0;
}
