// Thread count of the one OpenMP pool.
#include "runtime/threads.h"

#include <thread>

namespace prism {

int num_cores() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

void set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : num_cores()); }

int num_threads() { return omp_get_max_threads(); }

}  // namespace prism
