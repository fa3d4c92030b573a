// Thread count of the one OpenMP pool.
#include "runtime/threads.h"

#include <atomic>
#include <thread>

namespace prism {

namespace {
// NOTE: omp_set_num_threads only sets the calling thread's ICV; threads started later (a
// deployment's replicas) begin from the process default. The count chosen here is kept so
// those threads can read it (num_threads) and take their share of it.
std::atomic<int> g_threads{0};
}  // namespace

int num_cores() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

void set_num_threads(int n) {
  const int t = n > 0 ? n : num_cores();
  g_threads.store(t, std::memory_order_relaxed);
  omp_set_num_threads(t);
}

int num_threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : omp_get_max_threads();
}

}  // namespace prism
