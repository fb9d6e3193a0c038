#pragma once

// A mutex that Clang's thread-safety analysis understands (as leveldb's port::Mutex), and the
// macros that state which lock guards what. libstdc++'s std::mutex carries no capability
// attributes, so members guarded by one cannot be checked; these wrap it at no cost.
//
//   mutable Mutex mu_;
//   std::vector<int> items_ TFD_GUARDED_BY(mu_);
//   void AddLocked(int x) TFD_REQUIRES(mu_);
//   void Add(int x) TFD_EXCLUDES(mu_) { MutexLock lock(&mu_); AddLocked(x); }
//
// `clang++ -Wthread-safety` (scripts/thread_safety, run by ctest) turns a member read without its
// lock, or a *Locked call without the lock held, into a compile error. GCC ignores the macros.

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TFD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TFD_THREAD_ANNOTATION(x)
#endif

#define TFD_CAPABILITY(x) TFD_THREAD_ANNOTATION(capability(x))
#define TFD_SCOPED_CAPABILITY TFD_THREAD_ANNOTATION(scoped_lockable)
#define TFD_GUARDED_BY(x) TFD_THREAD_ANNOTATION(guarded_by(x))
#define TFD_PT_GUARDED_BY(x) TFD_THREAD_ANNOTATION(pt_guarded_by(x))
#define TFD_REQUIRES(...) TFD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TFD_EXCLUDES(...) TFD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TFD_ACQUIRE(...) TFD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TFD_RELEASE(...) TFD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TFD_ASSERT_HELD(x) TFD_THREAD_ANNOTATION(assert_capability(x))
#define TFD_NO_THREAD_SAFETY_ANALYSIS TFD_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tfd {

class TFD_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() TFD_ACQUIRE() { mu_.lock(); }
  void Unlock() TFD_RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the lock (a callback run under it); checks nothing at run time.
  void AssertHeld() const TFD_ASSERT_HELD(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class TFD_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) TFD_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() TFD_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable bound to one Mutex; Wait* must be called with it held, and return with it held.
class CondVar {
 public:
  explicit CondVar(Mutex* mu) : mu_(mu) {}
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait() TFD_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // False when `deadline` passed without a signal (spurious wake-ups return true: re-check the condition).
  template <class Clock, class Duration>
  bool WaitUntil(const std::chrono::time_point<Clock, Duration>& deadline) TFD_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    const bool signalled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  Mutex* const mu_;
  std::condition_variable cv_;
};

}  // namespace tfd
