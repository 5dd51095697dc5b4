// Mutex with the parts of absl::Mutex's API this project uses (Lock/Unlock,
// MutexLock, Await, AwaitWithTimeout), built on std::mutex and
// std::condition_variable so that ThreadSanitizer sees every ordering. Debian's
// Abseil is prebuilt without TSan instrumentation, which makes absl::Mutex
// invisible to it. Thread-safety annotations (ABSL_GUARDED_BY) apply as usual.
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace kvferry {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  // Waiters re-check their predicates whenever the mutex is released.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_.unlock();
    cv_.notify_all();
  }

  // With the mutex held: waits until pred() holds (pred runs with it held).
  template <typename Pred>
  void Await(Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> l(mu_, std::adopt_lock);
    cv_.wait(l, pred);
    l.release();
  }

  // As Await, but gives up after `timeout`; returns pred().
  template <typename Pred>
  bool AwaitWithTimeout(Pred pred, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> l(mu_, std::adopt_lock);
    const bool ok = cv_.wait_for(l, absl::ToChronoNanoseconds(timeout), pred);
    l.release();
    return ok;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace kvferry
