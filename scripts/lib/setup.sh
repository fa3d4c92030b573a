# Shared by scripts/run and scripts/test: install missing Debian packages (silent when none
# is missing), then configure and build. Sourced, not executed.
set -euo pipefail

PRISM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Every Debian package Prism builds, runs or tests with.
PRISM_PACKAGES=(
  cmake ninja-build ccache g++ pkg-config
  libdnnl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libutf8proc-dev libpcre2-dev libsentencepiece-dev libboost-dev libtomlplusplus-dev
  libhiredis-dev libxxhash-dev libfaiss-dev libopenblas0-openmp redis-server
  libgtest-dev libgmock-dev libbenchmark-dev
  libpng-dev libjpeg-dev libwebp-dev libgif-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev
  libssl-dev openssl
  libsndfile1-dev libsoxr-dev libfftw3-dev libswresample-dev
  python3 python3-torch python3-numpy python3-jinja2 python3-pil python3-scipy python3-onnx
)

prism_install_packages() {
  local missing=()
  for pkg in "${PRISM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "prism: installing missing packages: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The JavaScript test clients (tests/integration: the openai SDK, ws) need Node.js >= 20 and
# npm; their packages come from the committed lockfile, reinstalled when it changes.
prism_install_test_clients() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "prism: installing Node.js and npm for the integration tests" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs >/dev/null
    command -v npm >/dev/null 2>&1 ||
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  local dir="$PRISM_ROOT/tests/integration"
  if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >/dev/null
  fi
}

# prism_build <build-dir> [extra cmake args...]
prism_build() {
  local dir="$1"
  shift
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/prism-ccache}"
  # Paths relative to the checkout: another clone (CI's) hits the same cache entries.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PRISM_ROOT}"
  export CCACHE_NOHASHDIR=1
  cmake -S "$PRISM_ROOT" -B "$dir" -G Ninja "$@" >/dev/null
  # Two cores and big translation units: more jobs than cores only thrashes.
  cmake --build "$dir" -j "$(nproc)"
}
