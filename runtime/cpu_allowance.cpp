// runtime/cpu_allowance.cpp: see cpu_allowance.h.
// NOTE: the cgroup of the process is a path relative to the root of the hierarchy
// (/proc/self/cgroup: "0::/a/b" for v2, "4:cpu,cpuacct:/a/b" for v1); the hierarchy is mounted
// somewhere (/proc/self/mountinfo), possibly at a sub-directory of it (a container sees its own
// cgroup as the mount's root). The directory is the mount point plus the path below the mount's
// root; every directory from there up to the mount point may carry a quota, and the tightest
// one applies.
#include "runtime/cpu_allowance.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace prism {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

// mountinfo writes space, tab, newline and backslash in paths as \ooo (octal).
std::string unescape_octal(const std::string& s) {
  std::string out;
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out.push_back(char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool read_line(const std::string& path, std::string& line) {
  std::ifstream in(path);
  return static_cast<bool>(std::getline(in, line));
}

// The cgroup path of the hierarchy with the cpu controller: v1's "cpu" line, else v2's "0::".
struct CgroupPath {
  bool v2 = false;
  std::string path;
};
std::optional<CgroupPath> cpu_cgroup(const std::string& proc_cgroup) {
  std::ifstream in(proc_cgroup);
  std::optional<CgroupPath> v2;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = CgroupPath{true, path};
      continue;
    }
    for (const std::string& c : split(controllers, ','))
      if (c == "cpu") return CgroupPath{false, path};
  }
  return v2;
}

// The mount of that hierarchy: its root within the hierarchy and its mount point.
struct Mount {
  std::string root, point;
};
std::optional<Mount> cgroup_mount(const std::string& proc_mountinfo, bool v2) {
  std::ifstream in(proc_mountinfo);
  for (std::string line; std::getline(in, line);) {
    // "36 35 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const std::vector<std::string> head = split(line.substr(0, dash), ' ');
    const std::vector<std::string> tail = split(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3) continue;
    if (v2 ? tail[0] != "cgroup2" : tail[0] != "cgroup") continue;
    if (!v2) {
      const std::vector<std::string> options = split(tail[2], ',');
      if (std::find(options.begin(), options.end(), "cpu") == options.end()) continue;
    }
    return Mount{unescape_octal(head[3]), unescape_octal(head[4])};
  }
  return std::nullopt;
}

// The part of `path` below `root` ("" when equal), or nullopt when it is not below it (a
// process moved out of the cgroup namespace's root sees "/../x").
std::optional<std::string> below_root(const std::string& path, const std::string& root) {
  if (root == "/" || root.empty()) return path == "/" ? std::string() : path;
  if (path.compare(0, root.size(), root) != 0) return std::nullopt;
  if (path.size() == root.size()) return std::string();
  if (path[root.size()] != '/') return std::nullopt;  // "/docker/abc" is not below "/docker/ab"
  return path.substr(root.size());
}

// quota / period at one directory, if it sets one.
std::optional<double> quota_at(const std::string& dir, bool v2, std::string& file) {
  std::string line;
  if (v2) {
    file = dir + "/cpu.max";  // "max 100000" or "150000 100000"
    if (!read_line(file, line)) return std::nullopt;
    const std::vector<std::string> f = split(line, ' ');
    if (f.size() != 2 || f[0] == "max") return std::nullopt;
    const double quota = std::strtod(f[0].c_str(), nullptr), period = std::strtod(f[1].c_str(), nullptr);
    if (quota <= 0 || period <= 0) return std::nullopt;
    return quota / period;
  }
  file = dir + "/cpu.cfs_quota_us";  // -1: none
  std::string period_line;
  if (!read_line(file, line) || !read_line(dir + "/cpu.cfs_period_us", period_line)) return std::nullopt;
  const double quota = std::strtod(line.c_str(), nullptr), period = std::strtod(period_line.c_str(), nullptr);
  if (quota <= 0 || period <= 0) return std::nullopt;
  return quota / period;
}

// CPUs in the affinity mask; 0 when it cannot be read. A cpu_set_t holds 1024 CPUs: larger
// machines need a bigger set (sched_getaffinity fails with EINVAL on a set too small).
int sched_affinity_cpus() {
  for (int n = CPU_SETSIZE; n <= (1 << 16); n *= 4) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) return 0;
    const size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    const int rc = sched_getaffinity(0, size, set);
    const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (rc == 0) return count;
  }
  return 0;
}

}  // namespace

int CpuAllowance::default_threads() const {
  int n = affinity_cpus > 0 ? affinity_cpus : std::max(online_cpus, 1);
  if (quota_cpus) n = std::min(n, int(std::ceil(*quota_cpus - 1e-9)));
  return std::max(n, 1);
}

std::string CpuAllowance::describe() const {
  std::ostringstream s;
  s << default_threads() << " (affinity: " << affinity_cpus << " of " << online_cpus << " CPUs; cgroup quota: ";
  if (quota_cpus) {
    s.precision(2);
    s << std::fixed << *quota_cpus << " CPUs from " << quota_file << ")";
  } else {
    s << "none)";
  }
  return s.str();
}

CpuAllowance read_cpu_allowance(const CpuAllowanceSources& sources) {
  CpuAllowance a;
  const unsigned hw = std::thread::hardware_concurrency();
  a.online_cpus = sources.online_cpus.value_or(hw == 0 ? 1 : int(hw));
  a.affinity_cpus = sources.affinity_cpus.value_or(sched_affinity_cpus());
  if (a.affinity_cpus <= 0) a.affinity_cpus = a.online_cpus;

  const std::optional<CgroupPath> cg = cpu_cgroup(sources.proc_cgroup);
  if (!cg) return a;
  const std::optional<Mount> mount = cgroup_mount(sources.proc_mountinfo, cg->v2);
  if (!mount) return a;
  // The cgroup path below the mount's root (a container's own cgroup is its mount's root).
  // Outside the mount's view only the mount point itself can be read.
  const std::string below = below_root(cg->path, mount->root).value_or("");
  const std::string top = sources.root + mount->point;
  std::string dir = top + below;
  while (true) {
    std::string file;
    if (std::optional<double> q = quota_at(dir, cg->v2, file); q && (!a.quota_cpus || *q < *a.quota_cpus)) {
      a.quota_cpus = q;
      a.quota_file = file.substr(sources.root.size());
    }
    if (dir.size() <= top.size()) break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  return a;
}

namespace {
std::mutex g_allowance_mu;
std::optional<CpuAllowance> g_allowance;  // guarded by g_allowance_mu
}  // namespace

const CpuAllowance& cpu_allowance() {
  std::lock_guard<std::mutex> lock(g_allowance_mu);
  if (!g_allowance) g_allowance = read_cpu_allowance();
  return *g_allowance;
}

void reread_cpu_allowance_for_testing(const CpuAllowanceSources& sources) {
  std::lock_guard<std::mutex> lock(g_allowance_mu);
  g_allowance = read_cpu_allowance(sources);
}

}  // namespace prism
