#!/usr/bin/env bash
# Builds with AddressSanitizer and UndefinedBehaviorSanitizer (-DZINC_SANITIZE=ON, CUDA off)
# into ${BUILD_DIR:-build-san} and runs the whole ctest suite there. Any ASan, LSan or UBSan
# report fails the test that printed it (CMakeLists.txt sets FAIL_REGULAR_EXPRESSION), and
# UBSan aborts on the first report (-fno-sanitize-recover), so a clean exit means no report.
#
#     scripts/ci-sanitize.sh            # extra arguments go to ctest, e.g. -R test_config
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-san}
scripts/build.sh -DZINC_SANITIZE=ON -DZINC_CUDA=OFF > /dev/null
cd "$BUILD_DIR"
ctest --output-on-failure -j2 --timeout 900 "$@"
