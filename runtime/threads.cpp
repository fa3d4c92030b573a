// Thread count of the one OpenMP pool, and the thread census test seam.
#include "runtime/threads.h"

#include "runtime/compute_gate.h"
#include "runtime/cpu_allowance.h"

namespace prism {

namespace {
// NOTE: omp_set_num_threads only sets the calling thread's ICV; threads started later (a
// deployment's replicas) begin from the process default. The count chosen here is kept so
// those threads can read it (num_threads) and take their share of it.
std::atomic<int> g_threads{0};

std::atomic<int> g_census_live{0};
std::atomic<int> g_census_most{0};
std::atomic<int64_t> g_census_regions{0};
std::atomic<int64_t> g_census_beyond{0};
}  // namespace

void set_num_threads(int n) {
  const int t = n > 0 ? n : cpu_allowance().default_threads();
  g_threads.store(t, std::memory_order_relaxed);
  omp_set_num_threads(t);
  ComputeGate::process().set_capacity(t);
}

int num_threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  if (t > 0) return t;
  // Not omp_get_max_threads(): that is the calling thread's ICV, and a replica thread that
  // set its share would read its share back (and size the process's gate from it).
  static const int fallback = cpu_allowance().default_threads();
  return fallback;
}

namespace thread_census {
namespace detail {
std::atomic<bool> on{false};

void enter(int team) {
  if (team > 1) {
    g_census_regions.fetch_add(1);
    if (team > ComputeGate::threads_leased_by_this_thread()) g_census_beyond.fetch_add(1);
  }
  const int now = g_census_live.fetch_add(team) + team;
  int seen = g_census_most.load();
  while (now > seen && !g_census_most.compare_exchange_weak(seen, now)) {
  }
}

void leave(int team) { g_census_live.fetch_sub(team); }
}  // namespace detail

void enable(bool enabled) {
  g_census_live.store(0);
  g_census_most.store(0);
  g_census_regions.store(0);
  g_census_beyond.store(0);
  detail::on.store(enabled);
}

int most() { return g_census_most.load(); }
int64_t regions() { return g_census_regions.load(); }
int64_t beyond_lease() { return g_census_beyond.load(); }
}  // namespace thread_census

}  // namespace prism
