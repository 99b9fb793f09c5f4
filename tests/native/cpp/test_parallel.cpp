// The core's parallel_for (common/parallel.h): every index once, the first
// error rethrown after all workers joined, absurd thread counts capped, and
// threads the system refuses to create leave the work to the calling thread.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.h"

using medretrieve::parallel_for;
using medretrieve::resolve_threads;

TEST(Parallel, EveryIndexOnceForAnyThreadCount) {
  for (long long threads : {-1LL, 0LL, 1LL, 3LL, 1000000LL}) {
    std::vector<std::atomic<int>> seen(5000);
    parallel_for(0, seen.size(), threads, [&](size_t i, size_t) { seen[i].fetch_add(1); });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1) << threads;
  }
  EXPECT_EQ(resolve_threads(1000000), medretrieve::hardware_threads());
  EXPECT_EQ(resolve_threads(-5), medretrieve::hardware_threads());
  EXPECT_EQ(resolve_threads(1), 1u);
}

TEST(Parallel, FirstErrorIsRethrownAfterTheLoopStops) {
  // Every other item takes 100 us, so finishing all of them would take seconds
  // even on 4 threads, while the thrower needs microseconds to unwind: a busy
  // CI machine once descheduled the thrower long enough for trivial items to
  // run out, so the margin is made wide rather than left to the scheduler.
  std::atomic<size_t> ran{0};
  EXPECT_THROW(parallel_for(0, 100000, 4,
                            [&](size_t i, size_t) {
                              ran.fetch_add(1);
                              if (i == 10) throw std::out_of_range("item 10");
                              std::this_thread::sleep_for(std::chrono::microseconds(100));
                            }),
               std::out_of_range);
  EXPECT_LT(ran.load(), 100000u);  // the other workers stopped taking items
}

#if defined(__SANITIZE_ADDRESS__)
#define MEDRETRIEVE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEDRETRIEVE_TEST_ASAN 1
#endif
#endif

namespace {
size_t vm_size_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmSize:") {
      size_t kb;
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 12, '\n');
  }
  return 0;
}
}  // namespace

TEST(Parallel, RefusedThreadsFallBackToTheCallingThread) {
#if defined(MEDRETRIEVE_TEST_ASAN)
  GTEST_SKIP() << "ASan's shadow memory cannot run under an address-space limit";
#else
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // No room for another thread stack: thread creations fail, except for the
    // few stacks glibc may keep cached from earlier tests (64 are asked for).
    const size_t vm = vm_size_bytes();
    const rlimit lim{rlim_t(vm + (4 << 20)), rlim_t(vm + (4 << 20))};
    if (vm == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(10);
    std::vector<std::atomic<int>> seen(20000);
    try {
      medretrieve::detail::run_parallel(0, seen.size(), 64, [&](size_t i, size_t) { seen[i].fetch_add(1); });
    } catch (...) {
      ::_exit(11);
    }
    for (auto& s : seen)
      if (s.load() != 1) ::_exit(12);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}
