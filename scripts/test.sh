#!/usr/bin/env bash
# Installs, builds and runs every test (ctest: labels cpu, nvme, mpi, gpu; gpu tests skip
# with the reason when no GPU is present), then says why each skipped test skipped
# (scripts/skip-reasons.sh). The exit status is ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
build=${BUILD_DIR:-build}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
(cd "$build" && ctest --output-on-failure -j2 --timeout 900) 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
scripts/skip-reasons.sh "$build" "$out"
exit "$rc"
