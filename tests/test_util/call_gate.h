// CallGate: lets a test hold a fake model's calls (encode, forward) on the engine's thread,
// to observe what queues or batches form meanwhile. Open by default; pause() makes every
// later call wait until step() lets one through or open() lets all through.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace prism::test {

struct CallGate {
  std::mutex mu;
  std::condition_variable cv;
  bool paused = false;
  int allowance = 0;
  int entered = 0;

  void pause() {
    std::lock_guard lock(mu);
    paused = true;
  }
  void open() {
    std::lock_guard lock(mu);
    paused = false;
    cv.notify_all();
  }
  void step() {
    std::lock_guard lock(mu);
    ++allowance;
    cv.notify_all();
  }
  // Waits until `n` calls entered since the gate was made; false after a generous minute.
  bool wait_entered(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return entered >= n; });
  }
  // Called by the fake at the start of each call.
  void pass() {
    std::unique_lock lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [&] { return !paused || allowance > 0; });
    if (paused) --allowance;
  }
};

}  // namespace prism::test
