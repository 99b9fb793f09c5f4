#include "common/metric.h"

#include <stdexcept>

namespace medretrieve {

Metric parse_metric(const std::string& name, const char* what) {
  if (name == "l2") return Metric::L2;
  if (name == "ip") return Metric::IP;
  if (name == "cosine") return Metric::Cosine;
  throw std::invalid_argument(std::string(what) + " must be one of 'l2', 'ip' or 'cosine', got '" + name + "'");
}

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::L2: return "l2";
    case Metric::IP: return "ip";
    case Metric::Cosine: return "cosine";
  }
  return "?";
}

}  // namespace medretrieve
