#!/usr/bin/env bash
# Renders a `prism bench --html` report in headless Chromium (Debian's chromium package) and
# checks that the picture shows its plots: pixels of the p50, p90 and p99 colours must be
# there. Run by hand, not in CI (Chromium is large).
#
#   scripts/bench_report_screenshot.sh REPORT.html [OUT.png]
#   scripts/bench_report_screenshot.sh --demo [OUT.png]
#
# --demo serves the demo set on a free port, sweeps it (embed-online at concurrency 1, 2, 4
# and 8), writes the report next to OUT.png and renders it. The prism binary is $PRISM_BIN,
# else build/prism, built first. Chromium is installed with apt-get when it is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage

find_chromium() { command -v chromium || command -v chromium-browser || true; }
CHROMIUM="$(find_chromium)"
if [ -z "$CHROMIUM" ]; then
  echo "bench_report_screenshot: installing Debian's chromium" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
  CHROMIUM="$(find_chromium)"
fi

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$1" = "--demo" ]; then
  OUT="$(realpath -m "${2:-bench_report.png}")"
  REPORT="${OUT%.png}.html"
  PRISM="${PRISM_BIN:-}"
  if [ -z "$PRISM" ]; then
    source "$ROOT/scripts/lib/setup.sh"
    prism_install_packages
    prism_build "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >&2
    PRISM="$ROOT/build/prism"
  fi
  "$PRISM" serve --port 0 --demo-dir "$WORK/demo" >"$WORK/serve.log" 2>&1 &
  SERVER_PID=$!
  URL=""
  for _ in $(seq 1 200); do
    URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$WORK/serve.log" | head -1 || true)"
    [ -n "$URL" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$URL" ] || { echo "bench_report_screenshot: prism serve did not start" >&2; cat "$WORK/serve.log" >&2; exit 1; }
  "$PRISM" bench --url "$URL" --workload embed-online --sweep 1,2,4,8 --duration 3 --warmup 1 \
    --html "$REPORT" --json "${OUT%.png}.json"
else
  REPORT="$(realpath "$1")"
  OUT="$(realpath -m "${2:-${REPORT%.html}.png}")"
fi

# --no-sandbox: Chromium refuses to run as root with its sandbox.
"$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$WORK/chromium" \
  --window-size=1360,2600 --screenshot="$OUT" "file://$REPORT" >"$WORK/chromium.log" 2>&1 || {
  cat "$WORK/chromium.log" >&2
  exit 1
}
[ -s "$OUT" ] || { echo "bench_report_screenshot: no screenshot written" >&2; exit 1; }

# The plots are there when the picture holds the series colours of html_report.cpp.
/usr/bin/python3 - "$OUT" <<'PY'
import sys
try:
    from PIL import Image
except ImportError:
    print(f"screenshot: {sys.argv[1]} (python3-pil is missing: colours not checked)")
    sys.exit(0)
img = Image.open(sys.argv[1]).convert("RGB")
colours = {"p50": (0x4E, 0x79, 0xA7), "p90": (0xF2, 0x8E, 0x2B), "p99": (0xE1, 0x57, 0x59)}
counts = dict.fromkeys(colours, 0)
for px in img.getdata():
    for name, c in colours.items():
        if all(abs(a - b) <= 12 for a, b in zip(px, c)):
            counts[name] += 1
print(f"screenshot: {sys.argv[1]} {img.size[0]}x{img.size[1]}, series pixels {counts}")
missing = [k for k, n in counts.items() if n < 200]
if missing:
    sys.exit(f"the report shows no plot in colour {', '.join(missing)}")
PY
