// The one similarity / distance family the whole core speaks of: the index's
// "space", the fusion operators' "metric" and the CUDA kernels' metric are
// the same three choices, named and parsed here once.
//
// Similarities (native API, fusion, CUDA): IP = a.b, L2 = -||a - b||^2,
// Cosine = a.b / (|a| |b|). The index stores "lower is closer" distances,
// the negated similarities (see index/vector_store.h).
#pragma once

#include <cstdint>
#include <string>

namespace medretrieve {

// The numeric values are written into index files (FileHeader::space):
// never renumber them.
enum class Metric : uint32_t { L2 = 0, IP = 1, Cosine = 2 };

// "l2" | "ip" | "cosine". Anything else throws std::invalid_argument
// "<what> must be one of 'l2', 'ip' or 'cosine', got '<name>'", so each
// caller names its own argument (space, metric).
Metric parse_metric(const std::string& name, const char* what = "metric");
// The name parse_metric accepts for m.
const char* metric_name(Metric m);
// True for a value an index file may hold.
inline bool is_metric(uint32_t v) { return v <= uint32_t(Metric::Cosine); }

}  // namespace medretrieve
