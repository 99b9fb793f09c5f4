#include "common/shared_mutex.h"

namespace medretrieve {

namespace {
thread_local const SharedMutex* reentrant_for = nullptr;
}  // namespace

SharedMutex::ReentrantReads::ReentrantReads(const SharedMutex& m) : previous_(reentrant_for) { reentrant_for = &m; }
SharedMutex::ReentrantReads::~ReentrantReads() { reentrant_for = previous_; }

void SharedMutex::lock() {
  std::unique_lock<std::mutex> g(m_);
  ++waiting_writers_;
  writers_cv_.wait(g, [&] { return !writer_active_ && active_readers_ == 0 && admitted_readers_ == 0; });
  --waiting_writers_;
  writer_active_ = true;
}

void SharedMutex::unlock() {
  std::lock_guard<std::mutex> g(m_);
  writer_active_ = false;
  ++writer_exits_;
  // Every reader that queued while this writer waited or worked goes next.
  admitted_readers_ = waiting_readers_;
  if (admitted_readers_)
    readers_cv_.notify_all();
  else if (waiting_writers_)
    writers_cv_.notify_one();
}

void SharedMutex::lock_shared() {
  std::unique_lock<std::mutex> g(m_);
  if (reentrant_for == this) {  // a nested read on behalf of a shared holder: no writer is active
    ++active_readers_;
    return;
  }
  ++waiting_readers_;
  const uint64_t arrived = writer_exits_;
  // Readers wait behind an active or waiting writer, unless a writer left
  // since they arrived (then they are among the admitted).
  readers_cv_.wait(g, [&] { return !writer_active_ && (waiting_writers_ == 0 || writer_exits_ != arrived); });
  --waiting_readers_;
  if (writer_exits_ != arrived && admitted_readers_ > 0) --admitted_readers_;
  ++active_readers_;
}

void SharedMutex::unlock_shared() {
  std::lock_guard<std::mutex> g(m_);
  --active_readers_;
  if (active_readers_ == 0 && admitted_readers_ == 0 && waiting_writers_) writers_cv_.notify_one();
}

}  // namespace medretrieve
