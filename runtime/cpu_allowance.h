// runtime/cpu_allowance.h: how much CPU this process may use, which sets the default size of the
// one compute pool: the CPUs of its affinity mask (taskset, cpuset) and its cgroup CPU quota
// (a container's --cpus: cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, the
// tightest of the process's cgroup and its ancestors). A pool larger than the quota is
// throttled in bursts: every barrier then waits for a thread the scheduler has parked.
// Reads files only; the paths are parameters so tests can point them at a fake tree.
#pragma once

#include <optional>
#include <string>

namespace prism {

struct CpuAllowance {
  int online_cpus = 0;                // std::thread::hardware_concurrency()
  int affinity_cpus = 0;              // CPUs in the affinity mask
  std::optional<double> quota_cpus;   // quota / period; none: no quota
  std::string quota_file;             // where the quota was read ("" without one)

  // min(affinity_cpus, ceil(quota_cpus)), at least 1.
  int default_threads() const;
  // "2 (affinity: 2 of 2 CPUs; cgroup quota: none)", or "1 (affinity: 2 of 2 CPUs; cgroup
  // quota: 0.50 CPUs from /sys/fs/cgroup/cpu/x/cpu.cfs_quota_us)".
  std::string describe() const;
};

// Where to look; the defaults are the real files.
struct CpuAllowanceSources {
  std::string proc_cgroup = "/proc/self/cgroup";
  std::string proc_mountinfo = "/proc/self/mountinfo";
  std::string root;  // prefixed to every mount point (a fake tree in tests); "" for the real one
  std::optional<int> affinity_cpus;  // tests: instead of sched_getaffinity
  std::optional<int> online_cpus;    // tests: instead of hardware_concurrency
};

CpuAllowance read_cpu_allowance(const CpuAllowanceSources& sources = {});

// The process's allowance, read once (at the first call).
const CpuAllowance& cpu_allowance();

// Test seam: reads the process's allowance again from `sources` (a fake tree), so that
// set_num_threads(0) follows it. References from cpu_allowance() see the new values.
void reread_cpu_allowance_for_testing(const CpuAllowanceSources& sources);

}  // namespace prism
