#!/usr/bin/env bash
# Configures and builds zinc into ${BUILD_DIR:-build} (CUDA when nvcc is found).
# Extra CMake arguments are passed through, e.g. scripts/build.sh -DZINC_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" "$@" > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
grep -A15 'zinc .* configuration' "$build.configure.log" | sed 's/^-- //'
cmake --build "$build" -j"$(nproc)"
