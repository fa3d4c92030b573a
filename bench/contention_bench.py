#!/usr/bin/env python3
"""bench/contention_bench.py: Prism on a shared CPU, measured in one run.

Drives the built `prism serve` with `prism bench --workload chat --concurrency 8
--output-tokens 16 --input-tokens 32 --ignore-eos` on the demo chat model and on a real-size
config with random weights (SmolLM2-360M), for the old behaviour and the new one:

  old  [server] compute_wait = "spin" (libgomp's default wait: OMP_WAIT_POLICY unset),
       compute_gate = false (deployments compute at the same time), PRISM_THREADS = the
       online CPUs (the old default ignored affinity and quotas)
  new  nothing set: Prism's defaults (compute_wait, the compute gate, the CPU allowance)

Phases (--phases, default all, in this order):
  wait     decode latency of the model alone (build/bench/generate_bench --modes decode, batch
           1, median step) under libgomp's default spin, OMP_WAIT_POLICY=PASSIVE and
           GOMP_SPINCOUNT=1000, 10000, 100000: what the default wait policy is chosen from
  quiet    one deployment, nothing else running
  hog      the same with a 2-thread CPU hog beside it (two bounded busy loops the bench
           starts before the warm-up and stops after the measurement)
  two      two deployments of the model in one server: each driven alone, then both at once
           (two clients); aggregate throughput against the better one alone
  taskset  the server under `taskset -c 0` (the new default sizes the pool from the affinity)
  quota    the server in a child cgroup with a 1-CPU quota (cgroup v1 cpu.cfs_quota_us or v2
           cpu.max; needs root and a writable cpu controller, else skipped)

Each configuration runs --repeats times, old and new alternating, and the median is reported;
ratios are against the quiet figure of the same behaviour (two: against the better one alone).
/proc/loadavg is printed before every measurement: the figures mean something only on a quiet
machine. Goals (issue 22): hog >= 40% of quiet throughput; two at once >= 90% of the better
one alone; quiet decode latency (new) within 5% of the old spin default.

  bench/contention_bench.py --build build [--smollm2 DIR] [--demo-dir DIR] [--repeats 3]
      [--duration 10] [--warmup 3] [--phases wait,quiet,hog,two,taskset,quota] [--models demo,smollm2]

--smollm2 DIR: a checkpoint written by
  /usr/bin/python3 bench/generate_peer.py write --config smollm2-360m --out DIR
(written there when missing). --demo-dir: the demo set (`prism demo init DIR` when missing).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_SHAPE = ["--workload", "chat", "--concurrency", "8", "--output-tokens", "16", "--input-tokens", "32",
               "--ignore-eos"]
POLICIES = ["old", "new"]
WAIT_ENVS = [("spin (libgomp default)", {}), ("PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
             ("GOMP_SPINCOUNT=1000", {"GOMP_SPINCOUNT": "1000"}),
             ("GOMP_SPINCOUNT=10000", {"GOMP_SPINCOUNT": "10000"}),
             ("GOMP_SPINCOUNT=100000", {"GOMP_SPINCOUNT": "100000"})]
CLEAN = ["OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "PRISM_COMPUTE_WAIT", "PRISM_COMPUTE_WAIT_APPLIED", "PRISM_THREADS",
         "OMP_NUM_THREADS"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(extra or {})
    return env


class Hog:
    """Two bounded busy loops (each stops by itself after `seconds`)."""

    def __init__(self, seconds):
        code = "import time\nt = time.time() + %f\nwhile time.time() < t: pass\n" % seconds
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


class Cgroup:
    """A child cgroup with a CPU quota of `cpus`, v1 (cpu.cfs_quota_us) or v2 (cpu.max)."""

    def __init__(self, cpus):
        self.dir = None
        name = "prism-contention-%d" % os.getpid()
        v1 = "/sys/fs/cgroup/cpu"
        if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
            d = os.path.join(v1, name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
                f.write("100000")
            with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(int(cpus * 100000)))
            self.dir = d
        elif "cpu" in open("/sys/fs/cgroup/cgroup.controllers").read().split():
            d = os.path.join("/sys/fs/cgroup", name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cpu.max"), "w") as f:
                f.write("%d 100000" % int(cpus * 100000))
            self.dir = d

    def prefix(self):
        # The server moves itself into the cgroup before it starts (same PID after exec).
        return ["sh", "-c", 'echo $$ > "%s/cgroup.procs" && exec "$@"' % self.dir, "sh"]

    def remove(self):
        if self.dir:
            for _ in range(50):
                try:
                    os.rmdir(self.dir)
                    return
                except OSError:
                    time.sleep(0.1)


class Server:
    def __init__(self, prism, work, name, deployments, policy, prefix=None):
        self.log_path = os.path.join(work, name + ".log")
        toml = os.path.join(work, name + ".toml")
        lines = ["[server]", 'host = "127.0.0.1"', "port = 0"]
        if policy == "old":
            lines += ['compute_wait = "spin"', "compute_gate = false"]
        for dep_name, model_dir, precision in deployments:
            lines += ["", "[[deployment]]", 'name = "%s"' % dep_name, 'task = "chat"', 'model = "%s"' % model_dir,
                      'precision = "%s"' % precision, "[deployment.batching]", "max_batch_size = 16",
                      "queue_capacity = 1024"]
        with open(toml, "w") as f:
            f.write("\n".join(lines) + "\n")
        env = clean_env({"PRISM_THREADS": str(os.cpu_count())} if policy == "old" else None)
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen((prefix or []) + [prism, "serve", "--config", toml], env=env, stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + 600
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"serving \d+ deployment\(s\) on http://[^:]+:(\d+)", open(self.log_path).read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.2)
        if self.port is None:
            self.stop()
            raise RuntimeError("prism serve did not start:\n" + open(self.log_path).read()[-3000:])
        text = open(self.log_path).read()
        m = re.search(r"compute pool: (\d+) threads \(default: (\d+)[^|]*\| wait: ([^|]*)\|", text)
        self.threads, self.default_threads, self.wait = (m.group(1), m.group(2), m.group(3).split(" (")[0]) if m else ("?",) * 3

    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def start_bench(prism, url, model, args, work, tag):
    out = os.path.join(work, tag + ".json")
    cmd = [prism, "bench", "--url", url, "--model", model] + BENCH_SHAPE + [
        "--duration", str(args.duration), "--warmup", str(args.warmup), "--json", out, "--quiet", "--no-metrics"]
    return subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out


def finish_bench(proc_out):
    proc, out = proc_out
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError("prism bench failed: " + err.decode()[-2000:])
    p = json.load(open(out))["points"][0]
    lat = p["latency_ms"]
    return {"rps": p["throughput_per_s"].get("requests", 0.0), "p50": lat["e2e"]["p50"], "p99": lat["e2e"]["p99"],
            "itl": lat.get("itl", {}).get("mean", float("nan")), "errors": p["errors_total"]}


def measure(prism, url, model, args, work, tag, hog=False):
    log("    %-40s load %s" % (tag, loadavg()))
    h = Hog(args.warmup + args.duration + 30) if hog else None
    try:
        return finish_bench(start_bench(prism, url, model, args, work, tag))
    finally:
        if h:
            h.stop()


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(rs):
    return {k: med([r[k] for r in rs]) for k in ("rps", "p50", "p99", "itl", "errors")}


def ensure_models(args, prism, work):
    models = []
    if "demo" in args.models:
        demo = args.demo_dir or os.path.join(work, "demo")
        if not os.path.isdir(os.path.join(demo, "demo-chat")):
            subprocess.run([prism, "demo", "init", demo], check=True, env=clean_env(), stdout=subprocess.DEVNULL)
        models.append(("demo-chat", os.path.join(demo, "demo-chat"), "f32", ["--precision", "f32"]))
    if "smollm2" in args.models:
        d = args.smollm2 or os.path.join(work, "smollm2-360m")
        if not os.path.exists(os.path.join(d, "config.json")):
            subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench/generate_peer.py"), "write", "--config",
                            "smollm2-360m", "--out", d], check=True)
        models.append(("smollm2-360m", with_chat_template(d, work), "bf16", ["--precision", "bf16"]))
    return models


# SmolLM2-Instruct's template (ChatML): the bench drives /v1/chat/completions, and
# generate_peer.py's checkpoints carry no template.
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def with_chat_template(d, work):
    """d itself when its tokenizer_config.json has a chat template, else a copy of d (links to its
    files) whose tokenizer_config.json has SmolLM2's."""
    path = os.path.join(d, "tokenizer_config.json")
    config = json.load(open(path)) if os.path.exists(path) else {}
    if config.get("chat_template"):
        return d
    out = os.path.join(work, os.path.basename(os.path.normpath(d)) + "-chat")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(d):
        if name != "tokenizer_config.json" and not os.path.exists(os.path.join(out, name)):
            os.symlink(os.path.join(os.path.abspath(d), name), os.path.join(out, name))
    config["chat_template"] = CHATML
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return out


def kernel_tier(prism):
    """The tier the benches run on: PRISM_ISA when set, else the CPU's best (prism info)."""
    if os.environ.get("PRISM_ISA"):
        return os.environ["PRISM_ISA"]
    out = subprocess.run([prism, "info"], capture_output=True, text=True).stdout
    m = re.search(r"kernels:\s+(\S+) tier", out)
    if not m:
        raise RuntimeError("prism info printed no kernels tier")
    return m.group(1)


def phase_wait(args, prism, models):
    gen = os.path.join(args.build, "bench", "generate_bench")
    # One tier (generate_bench runs every tier the CPU has without PRISM_ISA).
    tier = {"PRISM_ISA": kernel_tier(prism)}
    if not os.access(gen, os.X_OK):
        log("wait: skipped (%s missing: cmake --build %s --target generate_bench)" % (gen, args.build))
        return
    print("\n## Decode latency by wait policy (model alone, batch 1, median step; generate_bench --modes decode)")
    for label, model_dir, _, precision in models:
        runs = {name: [] for name, _ in WAIT_ENVS}
        for r in range(args.repeats):
            for name, extra in WAIT_ENVS:
                log("  wait %s %-24s load %s" % (label, name, loadavg()))
                out = subprocess.run([gen, "--model", model_dir, "--modes", "decode", "--no-peer", "--decode-tokens",
                                      "64", "--max-model-len", "2048"] + precision, env=clean_env(dict(extra, **tier)),
                                     capture_output=True, text=True)
                m = re.search(r"model decode at batch 1 .*?: ([0-9.]+) tokens/s \(median step", out.stdout)
                if not m:
                    log(out.stdout[-2000:] + out.stderr[-2000:])
                    raise RuntimeError("generate_bench printed no decode figure")
                runs[name].append(1000.0 / float(m.group(1)))
        base = med(runs[WAIT_ENVS[0][0]])
        print("\n%s (ms per token, median of %d)" % (label, args.repeats))
        print("| wait | ms/token | vs spin (libgomp default) | runs |")
        print("|---|---|---|---|")
        for name, _ in WAIT_ENVS:
            v = med(runs[name])
            print("| %s | %.2f | %.3f | %s |" % (name, v, v / base, ", ".join("%.2f" % x for x in runs[name])))


def phase_serving(args, prism, work, models):
    phases = [p for p in ("quiet", "hog", "two", "taskset", "quota") if p in args.phases]
    if not phases:
        return
    can_quota = "quota" in phases
    if can_quota:
        try:
            Cgroup(1.0).remove()
        except OSError as e:
            log("quota: skipped (cannot create a cgroup with a CPU quota: %s)" % e)
            can_quota = False
    for label, model_dir, precision, _ in models:
        res = {}  # (scenario, policy) -> list of runs
        info = {}  # (scenario, policy) -> "threads/default/wait"
        for r in range(args.repeats):
            for scenario in phases:
                if scenario == "quota" and not can_quota:
                    continue
                for policy in POLICIES:
                    tag = "%s-%s-%s-%d" % (label, scenario, policy, r)
                    if scenario == "two":
                        s = Server(prism, work, tag, [("a", model_dir, precision), ("b", model_dir, precision)], policy)
                        try:
                            info[(scenario, policy)] = "%s/%s" % (s.threads, s.wait)
                            res.setdefault(("alone-a", policy), []).append(
                                measure(prism, s.url(), "a", args, work, tag + "-a"))
                            res.setdefault(("alone-b", policy), []).append(
                                measure(prism, s.url(), "b", args, work, tag + "-b"))
                            log("    %-40s load %s" % (tag + "-both", loadavg()))
                            pa = start_bench(prism, s.url(), "a", args, work, tag + "-both-a")
                            pb = start_bench(prism, s.url(), "b", args, work, tag + "-both-b")
                            ra, rb = finish_bench(pa), finish_bench(pb)
                            res.setdefault(("both", policy), []).append(
                                {"rps": ra["rps"] + rb["rps"], "p50": max(ra["p50"], rb["p50"]),
                                 "p99": max(ra["p99"], rb["p99"]), "itl": max(ra["itl"], rb["itl"]),
                                 "errors": ra["errors"] + rb["errors"]})
                        finally:
                            s.stop()
                        continue
                    prefix, cg = None, None
                    if scenario == "taskset":
                        prefix = ["taskset", "-c", "0"]
                    elif scenario == "quota":
                        cg = Cgroup(1.0)
                        prefix = cg.prefix()
                    s = Server(prism, work, tag, [("m", model_dir, precision)], policy, prefix)
                    try:
                        info[(scenario, policy)] = "%s (default %s) / %s" % (s.threads, s.default_threads, s.wait)
                        res.setdefault((scenario, policy), []).append(
                            measure(prism, s.url(), "m", args, work, tag, hog=scenario == "hog"))
                    finally:
                        s.stop()
                        if cg:
                            cg.remove()
        report(label, res, info)


def report(label, res, info):
    print("\n## %s: prism bench %s (median of runs)" % (label, " ".join(BENCH_SHAPE)))
    print("| scenario | behaviour | threads / wait | req/s | vs quiet | e2e p50 ms | vs quiet | e2e p99 ms | vs quiet"
          " | ITL mean ms | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for scenario in ("quiet", "hog", "taskset", "quota", "alone-a", "alone-b", "both"):
        for policy in POLICIES:
            if (scenario, policy) not in res:
                continue
            s = summarize(res[(scenario, policy)])
            q = summarize(res[("quiet", policy)]) if ("quiet", policy) in res else None
            if scenario == "both":
                alone = [summarize(res[(k, policy)]) for k in ("alone-a", "alone-b") if (k, policy) in res]
                q = max(alone, key=lambda x: x["rps"]) if alone else None
            key = "two" if scenario in ("alone-a", "alone-b", "both") else scenario
            ratio = lambda k: ("%.2f" % (s[k] / q[k])) if q and q[k] else "-"
            print("| %s | %s | %s | %.1f | %s | %.0f | %s | %.0f | %s | %.1f | %g |" % (
                scenario, policy, info.get((key, policy), "?"), s["rps"], ratio("rps"), s["p50"], ratio("p50"),
                s["p99"], ratio("p99"), s["itl"], s["errors"]))
    print("\nGoals (new): ", end="")
    checks = []
    if ("hog", "new") in res and ("quiet", "new") in res:
        v = summarize(res[("hog", "new")])["rps"] / summarize(res[("quiet", "new")])["rps"]
        checks.append("hog %.0f%% of quiet (goal >= 40%%) %s" % (100 * v, "ok" if v >= 0.4 else "MISSED"))
    if ("both", "new") in res:
        alone = max(summarize(res[(k, "new")])["rps"] for k in ("alone-a", "alone-b"))
        v = summarize(res[("both", "new")])["rps"] / alone
        checks.append("two at once %.0f%% of the better alone (goal >= 90%%) %s" % (100 * v, "ok" if v >= 0.9 else "MISSED"))
    if ("quiet", "new") in res and ("quiet", "old") in res:
        v = summarize(res[("quiet", "new")])["itl"] / summarize(res[("quiet", "old")])["itl"]
        checks.append("quiet ITL new/old %.3f (goal <= 1.05) %s" % (v, "ok" if v <= 1.05 else "MISSED"))
    print("; ".join(checks) if checks else "-")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--smollm2", default="")
    ap.add_argument("--demo-dir", default="")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--phases", default="wait,quiet,hog,two,taskset,quota")
    ap.add_argument("--models", default="demo,smollm2")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, configs, JSON)")
    args = ap.parse_args()
    args.phases = args.phases.split(",")
    args.models = args.models.split(",")
    prism = os.path.join(args.build, "prism")
    if not os.access(prism, os.X_OK):
        sys.exit("missing %s: cmake --build %s --target prism generate_bench" % (prism, args.build))
    work = tempfile.mkdtemp(prefix="prism-contention-")
    try:
        print("# contention_bench: %d CPUs online, load %s at start; %d repeats of %ds (+%ds warm-up)" % (
            os.cpu_count(), loadavg(), args.repeats, args.duration, args.warmup))
        models = ensure_models(args, prism, work)
        if "wait" in args.phases:
            phase_wait(args, prism, models)
        phase_serving(args, prism, work, models)
        print("\nload at the end: %s" % loadavg())
    finally:
        if args.keep:
            log("work directory kept: " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
