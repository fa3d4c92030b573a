// runtime/compute_gate.h: the one compute pool, shared by every deployment of the process.
// Each engine runs its model calls inside a Lease of as many threads as its OpenMP team. The
// gate admits leases first come, first served while their threads fit in the pool: two
// deployments stepping at the same moment take turns on all the cores instead of starting two
// OpenMP teams on the same cores (which makes both several times slower), and replicas that
// split the pool between them (each a share) still run side by side.
// NOTE (why not a mutex): a std::mutex is not fair, and one deployment stepping back to back
// could starve another; tickets keep arrival order. A lease that does not fit waits even if a
// later, smaller one would fit: no starvation of wide teams.
// NOTE (nesting): a thread that already holds a lease and asks again (an encoder run inside a
// step that holds one) gets an empty lease at once: its team is the one already counted, and
// waiting for itself would deadlock.
// Must not: be held across anything but compute (no I/O, no waiting on clients or queues).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace prism {

class ComputeGate {
 public:
  explicit ComputeGate(int capacity);
  // The process's gate. Its capacity is the pool's size: set_num_threads (runtime/threads.h)
  // keeps it equal to num_threads().
  static ComputeGate& process();

  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    int threads() const { return threads_; }  // 0 for a nested (empty) lease
    double waited_seconds() const { return waited_seconds_; }  // 0 when admitted at once
    double held_seconds() const;  // since admission

   private:
    friend class ComputeGate;
    Lease(ComputeGate* gate, int threads, double waited_seconds);
    ComputeGate* gate_;  // not owned; null once moved from, and for a nested lease
    int threads_;
    double waited_seconds_;
    std::chrono::steady_clock::time_point admitted_;
  };

  // Blocks until `threads` (clamped to [1, capacity]) fit, in arrival order. Disabled: never
  // blocks (the lease is still counted in in_use and max_in_use).
  [[nodiscard]] Lease acquire(int threads);

  // The pool's size; leases already admitted keep their threads (a smaller pool admits nothing
  // new until they fit).
  void set_capacity(int capacity);
  // false: leases never wait, so deployments compute at the same time, each with its own
  // team (the behaviour before the gate; [server] compute_gate = false, for comparisons).
  void set_enabled(bool enabled);
  bool enabled() const;

  // The threads of the lease the calling thread holds (of any gate; an outer lease when
  // nested), 0 without one.
  static int threads_leased_by_this_thread();

  int capacity() const;
  int in_use() const;
  int max_in_use() const;  // the most threads ever leased at once (tests count oversubscription)
  int waiting() const;     // leases asked for and not admitted yet
  void reset_max_in_use();

 private:
  void release(int threads);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int capacity_;              // guarded by mu_
  bool enabled_ = true;       // guarded by mu_
  uint64_t next_ticket_ = 0;  // guarded by mu_
  uint64_t serving_ = 0;      // the ticket admitted next; guarded by mu_
  int in_use_ = 0;            // guarded by mu_
  int max_in_use_ = 0;        // guarded by mu_
};

}  // namespace prism
