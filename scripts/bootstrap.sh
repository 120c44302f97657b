#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine (root; apt-get) and
# the pinned Python packages used by cross-checks. Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev libopenblas-dev liblapacke-dev libcli11-dev libspdlog-dev libfmt-dev
  libhdf5-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  clang libfuzzer-14-dev gnuplot-nox python3 python3-pip time
)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Pinned Python packages (cross-checks only; never on the product's path).
if ! python3 -c 'import safetensors, numpy, h5py, ml_dtypes' >/dev/null 2>&1; then
  echo "bootstrap: installing pinned Python packages (requirements-dev.txt)" >&2
  python3 -m pip install -q -r requirements-dev.txt 2>&1 | grep -v "Running pip as the 'root'" || true
fi
