#!/usr/bin/env bash
# Installs, builds and runs every test (ctest: labels cpu, nvme, mpi, gpu; gpu tests skip
# with the reason when no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j2 --timeout 900
