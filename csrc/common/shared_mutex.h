// The indexes' reader/writer lock: fair to writers.
//
// std::shared_mutex on glibc prefers readers: while searches keep overlapping
// (four threads searching back to back), an exclusive writer (FlatIndex.add,
// save, resize) never finds the lock free and waits until the searches stop
// (bench/liveness.py measured > 120 s for an add that takes 0.1 s alone).
// Here a waiting writer holds back readers that arrive after it, and when a
// writer leaves, the readers that queued behind it go in before the next
// writer: neither side can starve the other.
//
// Re-entry: a search holds the lock shared while it calls a Python filter
// (on its worker threads), and the filter may read the same index. With a
// writer waiting, that nested read would queue behind the writer, which waits
// for the search: a deadlock. Code that runs a callback under a shared lock
// marks the calling thread with ReentrantReads; a shared lock taken by that
// thread on that mutex is then granted at once (no writer can be active while
// the outer shared lock is held).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace medretrieve {

class SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock();
  void unlock();
  void lock_shared();
  void unlock_shared();

  // While alive, this thread's shared locks on `m` are granted at once: the
  // caller guarantees that the thread runs on behalf of a holder of a shared
  // lock on `m` (a search's worker calling a filter).
  class ReentrantReads {
   public:
    explicit ReentrantReads(const SharedMutex& m);
    ~ReentrantReads();
    ReentrantReads(const ReentrantReads&) = delete;
    ReentrantReads& operator=(const ReentrantReads&) = delete;

   private:
    const SharedMutex* previous_;
  };

 private:
  std::mutex m_;
  std::condition_variable readers_cv_, writers_cv_;
  size_t active_readers_ = 0;
  size_t waiting_readers_ = 0;
  size_t waiting_writers_ = 0;
  size_t admitted_readers_ = 0;  // readers a leaving writer let in ahead of the next writer
  uint64_t writer_exits_ = 0;    // a reader queued before a writer left is one of the admitted
  bool writer_active_ = false;
};

}  // namespace medretrieve
