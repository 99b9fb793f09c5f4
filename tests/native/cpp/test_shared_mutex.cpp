// SharedMutex (common/shared_mutex.h): exclusion, a writer getting in while
// readers keep coming, readers getting in while writers keep coming, and
// nested reads of a shared holder's helper thread not deadlocking behind a
// waiting writer. Progress is judged by order (who finished first), never by
// time; a deadlock fails the test after a generous wait instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "common/shared_mutex.h"

using medretrieve::SharedMutex;

namespace {

void finish_or_fail(std::future<void>& f, const char* what) {
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << what << " deadlocked";
    std::_Exit(1);  // the stuck threads cannot be joined
  }
  f.get();
}

}  // namespace

TEST(SharedMutex, WritersExcludeEveryoneReadersShare) {
  SharedMutex mu;
  int value = 0;
  std::atomic<int> readers_inside{0}, max_readers{0};
  std::atomic<bool> broken{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        if ((i + t) % 4 == 0) {
          std::unique_lock<SharedMutex> g(mu);
          if (readers_inside.load() != 0) broken = true;
          ++value;
        } else {
          std::shared_lock<SharedMutex> g(mu);
          const int now = readers_inside.fetch_add(1) + 1;
          int seen = max_readers.load();
          while (now > seen && !max_readers.compare_exchange_weak(seen, now)) {
          }
          readers_inside.fetch_sub(1);
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(broken.load());
  EXPECT_EQ(value, 2000);
}

TEST(SharedMutex, AWriterGetsInWhileReadersKeepComing) {
  SharedMutex mu;
  std::atomic<bool> written{false};
  std::atomic<int> reads_after_write{0};
  std::atomic<int> started{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&] {
      started.fetch_add(1);
      // Overlapping readers, each holding the lock a little: without writer
      // fairness the writer would wait for the last of these 400 reads.
      for (int i = 0; i < 100; ++i) {
        std::shared_lock<SharedMutex> g(mu);
        if (written.load()) reads_after_write.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  while (started.load() < 4) std::this_thread::yield();
  auto writer = std::async(std::launch::async, [&] {
    std::unique_lock<SharedMutex> g(mu);
    written = true;
  });
  finish_or_fail(writer, "the writer");
  for (auto& t : readers) t.join();
  EXPECT_GT(reads_after_write.load(), 0);
}

TEST(SharedMutex, ReadersGetInWhileWritersKeepComing) {
  SharedMutex mu;
  std::atomic<bool> read{false};
  std::atomic<int> writes_after_read{0}, started{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t)
    writers.emplace_back([&] {
      started.fetch_add(1);
      for (int i = 0; i < 100; ++i) {
        std::unique_lock<SharedMutex> g(mu);
        if (read.load()) writes_after_read.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  while (started.load() < 3) std::this_thread::yield();
  auto reader = std::async(std::launch::async, [&] {
    std::shared_lock<SharedMutex> g(mu);
    read = true;
  });
  finish_or_fail(reader, "the reader");
  for (auto& t : writers) t.join();
  EXPECT_GT(writes_after_read.load(), 0);
}

TEST(SharedMutex, NestedReadOfAHoldersHelperPassesAWaitingWriter) {
  SharedMutex mu;
  std::shared_lock<SharedMutex> outer(mu);  // a search holding the lock
  std::atomic<bool> writer_waiting{false};
  auto writer = std::async(std::launch::async, [&] {
    writer_waiting = true;
    std::unique_lock<SharedMutex> g(mu);  // waits for `outer`
  });
  while (!writer_waiting.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the writer is now queued (order, not speed)
  auto helper = std::async(std::launch::async, [&] {  // the search's worker running a filter
    SharedMutex::ReentrantReads reentry(mu);
    std::shared_lock<SharedMutex> nested(mu);
  });
  finish_or_fail(helper, "the nested read");
  outer.unlock();
  finish_or_fail(writer, "the writer");
}
