#!/usr/bin/env bash
# ctest's runner of one Criterion executable (CMakeLists.txt): runs it one test at a time,
# verbose (each test's [RUN ]/[PASS]/[SKIP] line and a skip's reason in the log), and
# turns its verdict into ctest's: its own exit status when it failed; 77 (SKIP_RETURN_CODE:
# ctest says "skipped") when it passed with every test skipped, or, for a gpu-labelled
# executable, with any test skipped (its GPU part did not run: Criterion 2.4 leaves skipped
# tests out of "Tested", so such a run would otherwise read as passed); else 0.
#
#     scripts/criterion-test.sh LABEL EXECUTABLE [criterion arguments]
set -uo pipefail
label=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" --jobs 1 --verbose 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] && exit "$rc"
if grep -q '^\[SKIP\]' "$log" &&
	{ [ "$label" = gpu ] || grep -q 'Synthesis: Tested: 0 |' "$log"; }; then
	exit 77
fi
exit 0
