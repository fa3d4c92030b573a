#!/usr/bin/python3
"""The api layer's rules, and the tensor-free layers', checked on the real build (CTest:
api_layering, frontends_layering). The link side (prism_api links no engines, models,
formats or runtime library) is checked when CMake configures (CMakeLists.txt).

1. No file under api/ reaches a runtime/, formats/, models/ or engines/ header, directly or
   through other headers: the api never touches tensors or runs a model (STYLE.md); it
   sees configs/, frontends/, pipelines/, serving/, media/ and text/. Each api source is
   preprocessed with its own compile command (compile_commands.json) and its dependency
   list read (-MM).
2. No file under api/ starts a thread, except the HTTP server's own I/O threads
   (api/http_server.cpp): blocking work goes to a serving::WorkPool or a pipelines::JobPool
   the app owns.
3. (frontends) No source under configs/, frontends/ or pipelines/ reaches a runtime/,
   formats/, models/ or engines/ header: they are what the api may include freely, and
   pipelines reach models only through deployments' queues.

Usage: check_api_layering.py SOURCE_DIR BUILD_DIR [api|frontends]. Exit 1 with one line per
violation.
"""
import json
import os
import re
import shlex
import subprocess
import sys

BELOW_THE_API = ("runtime", "formats", "models", "engines")
THREAD_START = re.compile(r"std::(j?thread)\s*[({]|std::(j?thread)\s+\w+\s*[({]|pthread_create|std::async\s*\(|\.detach\(\)")
THREADS_ALLOWED = {"api/http_server.cpp"}
TENSOR_FREE_LAYERS = ("configs", "frontends", "pipelines")


def dependencies(entry, source_dir):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    if args and os.path.basename(args[0]) == "ccache":
        args = args[1:]
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    r = subprocess.run(out + ["-MM", "-MG"], cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{entry['file']}: preprocessing failed:\n{r.stderr}")
    deps = []
    for d in r.stdout.replace("\\\n", " ").split()[1:]:
        path = os.path.normpath(os.path.join(entry["directory"], d))
        if path.startswith(source_dir + os.sep):
            deps.append(os.path.relpath(path, source_dir))
    return deps


def sources_under(entries, source_dir, layers):
    roots = tuple(os.path.join(source_dir, layer) + os.sep for layer in layers)
    return sorted((e for e in entries if os.path.realpath(e["file"]).startswith(roots)), key=lambda e: e["file"])


def check_api(entries, source_dir):
    api = sources_under(entries, source_dir, ("api",))
    if not api:
        return None, ["no api sources in compile_commands.json"]
    problems = []
    for e in api:
        rel = os.path.relpath(os.path.realpath(e["file"]), source_dir)
        for dep in dependencies(e, source_dir):
            if dep.split("/", 1)[0] in BELOW_THE_API:
                problems.append(f"{rel} reaches {dep}: the api sees no runtime/, formats/, models/ or engines/ header")
    for root, _, files in os.walk(os.path.join(source_dir, "api")):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, source_dir)
            if not name.endswith((".cpp", ".h")) or rel in THREADS_ALLOWED:
                continue
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    code = line.split("//", 1)[0]
                    if THREAD_START.search(code):
                        problems.append(f"{rel}:{n} starts a thread: hand blocking work to a WorkPool or JobPool")
    return f"{len(api)} api sources checked", problems


def check_tensor_free(entries, source_dir):
    sources = sources_under(entries, source_dir, TENSOR_FREE_LAYERS)
    if not sources:
        return None, ["no configs/, frontends/ or pipelines/ sources in compile_commands.json"]
    problems = []
    for e in sources:
        rel = os.path.relpath(os.path.realpath(e["file"]), source_dir)
        for dep in dependencies(e, source_dir):
            if dep.split("/", 1)[0] in BELOW_THE_API:
                problems.append(f"{rel} reaches {dep}: configs/, frontends/ and pipelines/ see no runtime/, "
                                "formats/, models/ or engines/ header")
    return f"{len(sources)} configs/, frontends/ and pipelines/ sources checked", problems


def main():
    source_dir, build_dir = (os.path.realpath(p) for p in sys.argv[1:3])
    mode = sys.argv[3] if len(sys.argv) > 3 else "api"
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    summary, problems = (check_tensor_free if mode == "frontends" else check_api)(entries, source_dir)
    for p in sorted(set(problems)):
        print(p)
    if summary is None:
        return 1
    print(f"{summary}: {len(set(problems))} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
