// A minimal parallel-for: std::thread workers pulling indices from an atomic
// counter (dynamic scheduling, so slow items such as high-level HNSW inserts
// do not stall a static partition). The first exception thrown by any worker
// stops the loop and is rethrown in the calling thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace medretrieve::index {

// <= 0 means "all hardware threads".
inline size_t resolve_threads(int requested) {
  if (requested > 0) return size_t(requested);
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? size_t(hw) : 1;
}

// Calls fn(i, worker) for i in [begin, end); worker is in [0, threads).
template <typename Fn>
void parallel_for(size_t begin, size_t end, int num_threads, Fn&& fn) {
  if (end <= begin) return;
  const size_t threads = std::min(resolve_threads(num_threads), end - begin);
  if (threads == 1) {
    for (size_t i = begin; i < end; ++i) fn(i, size_t(0));
    return;
  }
  std::atomic<size_t> next(begin);
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&](size_t w) {
    for (;;) {
      size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= end) break;
      try {
        fn(i, w);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu);
        if (!error) error = std::current_exception();
        next.store(end, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (size_t w = 1; w < threads; ++w) pool.emplace_back(worker, w);
  worker(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace medretrieve::index
