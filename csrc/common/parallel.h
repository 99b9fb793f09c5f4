// The one parallel-for of the native core (index adds and searches, MMR
// batches): std::thread workers pulling indices from an atomic counter
// (dynamic scheduling, so slow items such as high-level HNSW inserts do not
// stall a static partition). The first exception thrown by any worker stops
// the loop and is rethrown in the calling thread once every worker joined.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace medretrieve {

// Hardware threads of this machine (at least 1), read once: libstdc++ asks
// the kernel on every call (it opens /sys/devices/system/cpu/online), which
// cost a single-query search a quarter of its time in system calls.
inline size_t hardware_threads() {
  static const size_t hw = [] {
    const unsigned n = std::thread::hardware_concurrency();
    return n ? size_t(n) : size_t(1);
  }();
  return hw;
}

// Threads a loop runs on: requested <= 0 means every hardware thread, and
// larger requests are capped there. The loops are CPU-bound, so threads
// beyond the hardware's only add switching, and each costs a stack: a request
// for 2000 threads under a 3 GiB address-space limit could not even start.
inline size_t resolve_threads(long long requested) {
  const size_t hw = hardware_threads();
  return requested <= 0 ? hw : std::min(size_t(requested), hw);
}

namespace detail {

// Calls fn(i, worker) for i in [begin, end) on the calling thread plus up to
// threads - 1 new ones (worker in [0, threads)). A thread the system refuses
// to create (no memory for its stack, a process or cgroup thread limit) is
// not an error: the workers already running, or the calling thread alone,
// take its share, and every started thread is joined before returning.
template <typename Fn>
void run_parallel(size_t begin, size_t end, size_t threads, Fn&& fn) {
  if (end <= begin) return;
  if (threads <= 1) {
    for (size_t i = begin; i < end; ++i) fn(i, size_t(0));
    return;
  }
  std::atomic<size_t> next(begin);
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&](size_t w) {
    for (;;) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
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
  try {
    pool.reserve(threads - 1);
  } catch (...) {
    threads = 1;  // no room even for the handles: the calling thread does it all
  }
  for (size_t w = 1; w < threads; ++w) {
    try {
      pool.emplace_back(worker, w);
    } catch (...) {  // std::system_error (EAGAIN) or bad_alloc: run with the threads we have
      break;
    }
  }
  worker(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

// Calls fn(i, worker) for i in [begin, end) on resolve_threads(num_threads)
// threads at most (never more than there are items).
template <typename Fn>
void parallel_for(size_t begin, size_t end, long long num_threads, Fn&& fn) {
  if (end <= begin) return;
  detail::run_parallel(begin, end, std::min(resolve_threads(num_threads), end - begin), std::forward<Fn>(fn));
}

}  // namespace medretrieve
