// The default thread count follows the affinity mask and the cgroup CPU quota, read from a
// fake /proc and cgroup tree (the file layouts of cgroup v1 and v2 as the kernel writes them).
#include "runtime/cpu_allowance.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>

#include "runtime/compute_gate.h"
#include "runtime/threads.h"
#include "test_util/paths.h"

namespace prism {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

class FakeTree {
 public:
  explicit FakeTree(const std::string& name) : root_(test::scratch_dir("cpu_allowance_" + name)) {}
  const fs::path& root() const { return root_; }
  void file(const std::string& path, const std::string& text) { write(root_ / path.substr(1), text); }
  CpuAllowanceSources sources(int affinity, int online) const {
    CpuAllowanceSources s;
    s.proc_cgroup = (root_ / "proc/self/cgroup").string();
    s.proc_mountinfo = (root_ / "proc/self/mountinfo").string();
    s.root = root_.string();
    s.affinity_cpus = affinity;
    s.online_cpus = online;
    return s;
  }
  CpuAllowance read(int affinity, int online) const { return read_cpu_allowance(sources(affinity, online)); }

 private:
  fs::path root_;
};

constexpr const char* kV1Mounts =
    "25 24 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw\n"
    "26 25 0:23 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
    "27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct\n";
constexpr const char* kV2Mounts = "30 24 0:26 / /sys/fs/cgroup rw,relatime shared:4 - cgroup2 cgroup2 rw\n";

TEST(CpuAllowance, NoCgroupFilesMeansTheAffinityMask) {
  FakeTree t("none");
  const CpuAllowance a = t.read(6, 8);
  EXPECT_EQ(a.default_threads(), 6);
  EXPECT_FALSE(a.quota_cpus.has_value());
  EXPECT_EQ(a.describe(), "6 (affinity: 6 of 8 CPUs; cgroup quota: none)");
}

TEST(CpuAllowance, V2QuotaRoundsUpAndCapsTheAffinityMask) {
  FakeTree t("v2");
  t.file("/proc/self/cgroup", "0::/docker/abc\n");
  t.file("/proc/self/mountinfo", kV2Mounts);
  t.file("/sys/fs/cgroup/docker/abc/cpu.max", "150000 100000\n");
  const CpuAllowance a = t.read(8, 8);
  ASSERT_TRUE(a.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*a.quota_cpus, 1.5);
  EXPECT_EQ(a.default_threads(), 2);
  EXPECT_EQ(a.quota_file, "/sys/fs/cgroup/docker/abc/cpu.max");
  EXPECT_EQ(a.describe(), "2 (affinity: 8 of 8 CPUs; cgroup quota: 1.50 CPUs from /sys/fs/cgroup/docker/abc/cpu.max)");
}

TEST(CpuAllowance, V2UnlimitedIsNoQuota) {
  FakeTree t("v2max");
  t.file("/proc/self/cgroup", "0::/user.slice\n");
  t.file("/proc/self/mountinfo", kV2Mounts);
  t.file("/sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
  EXPECT_FALSE(t.read(4, 4).quota_cpus.has_value());
  EXPECT_EQ(t.read(4, 4).default_threads(), 4);
}

TEST(CpuAllowance, TheTightestAncestorApplies) {
  FakeTree t("v2nested");
  t.file("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  t.file("/proc/self/mountinfo", kV2Mounts);
  t.file("/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  t.file("/sys/fs/cgroup/kubepods/pod1/cpu.max", "100000 100000\n");
  t.file("/sys/fs/cgroup/kubepods/cpu.max", "400000 100000\n");
  const CpuAllowance a = t.read(16, 16);
  ASSERT_TRUE(a.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*a.quota_cpus, 1.0);
  EXPECT_EQ(a.default_threads(), 1);
  EXPECT_EQ(a.quota_file, "/sys/fs/cgroup/kubepods/pod1/cpu.max");
}

TEST(CpuAllowance, V1QuotaFromTheCpuController) {
  FakeTree t("v1");
  t.file("/proc/self/cgroup", "9:memory:/ctr\n4:cpu,cpuacct:/ctr\n0::/\n");
  t.file("/proc/self/mountinfo", kV1Mounts);
  t.file("/sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_quota_us", "50000\n");
  t.file("/sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_period_us", "100000\n");
  const CpuAllowance a = t.read(2, 2);
  ASSERT_TRUE(a.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*a.quota_cpus, 0.5);
  EXPECT_EQ(a.default_threads(), 1);
}

TEST(CpuAllowance, V1MinusOneIsNoQuota) {
  FakeTree t("v1none");
  t.file("/proc/self/cgroup", "4:cpu,cpuacct:/\n");
  t.file("/proc/self/mountinfo", kV1Mounts);
  t.file("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  t.file("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_FALSE(t.read(2, 2).quota_cpus.has_value());
}

TEST(CpuAllowance, AContainerSeesItsCgroupAsTheMountRoot) {
  // Inside a container the hierarchy's mount root is the container's own cgroup, and
  // /proc/self/cgroup names the same path: the quota sits at the mount point itself.
  FakeTree t("container");
  t.file("/proc/self/cgroup", "0::/docker/abc\n");
  t.file("/proc/self/mountinfo", "30 24 0:26 /docker/abc /sys/fs/cgroup ro,relatime - cgroup2 cgroup2 rw\n");
  t.file("/sys/fs/cgroup/cpu.max", "300000 100000\n");
  const CpuAllowance a = t.read(64, 64);
  ASSERT_TRUE(a.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*a.quota_cpus, 3.0);
  EXPECT_EQ(a.default_threads(), 3);
}

TEST(CpuAllowance, AffinityBelowTheQuotaWins) {
  FakeTree t("taskset");
  t.file("/proc/self/cgroup", "0::/x\n");
  t.file("/proc/self/mountinfo", kV2Mounts);
  t.file("/sys/fs/cgroup/x/cpu.max", "400000 100000\n");
  EXPECT_EQ(t.read(1, 8).default_threads(), 1);
}

TEST(CpuAllowance, AMountRootIsAPathPrefixOnlyAtASlash) {
  // The process's cgroup /docker/abc is not below a mount of /docker/ab: only the mount
  // point itself is read, never /sys/fs/cgroup/c (what cutting the string would give).
  FakeTree t("prefix");
  t.file("/proc/self/cgroup", "0::/docker/abc\n");
  t.file("/proc/self/mountinfo", "30 24 0:26 /docker/ab /sys/fs/cgroup ro,relatime - cgroup2 cgroup2 rw\n");
  t.file("/sys/fs/cgroup/c/cpu.max", "100000 100000\n");
  t.file("/sys/fs/cgroup/cpu.max", "200000 100000\n");
  const CpuAllowance a = t.read(8, 8);
  ASSERT_TRUE(a.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*a.quota_cpus, 2.0);
}

TEST(CpuAllowance, EscapedMountPoints) {
  // mountinfo writes a space in a path as \040.
  FakeTree t("escaped");
  t.file("/proc/self/cgroup", "3:cpu:/job\n");
  t.file("/proc/self/mountinfo", "27 25 0:24 / /cg\\040v1/cpu rw - cgroup cgroup rw,cpu\n");
  t.file("/cg v1/cpu/job/cpu.cfs_quota_us", "250000\n");
  t.file("/cg v1/cpu/job/cpu.cfs_period_us", "100000\n");
  const CpuAllowance a = t.read(4, 4);
  ASSERT_TRUE(a.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*a.quota_cpus, 2.5);
  EXPECT_EQ(a.default_threads(), 3);
}

// set_num_threads(0) (PRISM_THREADS unset) sizes the pool, OpenMP's team and the compute gate
// from the allowance: here a fake cgroup v2 quota of 1.5 CPUs under an 8-CPU mask.
TEST(CpuAllowance, TheDefaultThreadCountFollowsTheCgroupFile) {
  FakeTree t("set_num_threads");
  t.file("/proc/self/cgroup", "0::/ctr\n");
  t.file("/proc/self/mountinfo", kV2Mounts);
  t.file("/sys/fs/cgroup/ctr/cpu.max", "150000 100000\n");
  reread_cpu_allowance_for_testing(t.sources(8, 8));
  set_num_threads(0);
  EXPECT_EQ(num_threads(), 2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  EXPECT_EQ(ComputeGate::process().capacity(), 2);
  EXPECT_EQ(cpu_allowance().describe(),
            "2 (affinity: 8 of 8 CPUs; cgroup quota: 1.50 CPUs from /sys/fs/cgroup/ctr/cpu.max)");

  // The quota changes (a container resized): a new read follows it.
  t.file("/sys/fs/cgroup/ctr/cpu.max", "50000 100000\n");
  reread_cpu_allowance_for_testing(t.sources(8, 8));
  set_num_threads(0);
  EXPECT_EQ(num_threads(), 1);
  EXPECT_EQ(ComputeGate::process().capacity(), 1);

  // PRISM_THREADS (an explicit count) wins over the allowance.
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  EXPECT_EQ(ComputeGate::process().capacity(), 3);

  reread_cpu_allowance_for_testing({});
  set_num_threads(0);
}

TEST(CpuAllowance, TheRealProcessHasAtLeastOneThread) {
  const CpuAllowance& a = cpu_allowance();
  EXPECT_GE(a.default_threads(), 1);
  EXPECT_LE(a.default_threads(), a.online_cpus);
}

}  // namespace
}  // namespace prism
