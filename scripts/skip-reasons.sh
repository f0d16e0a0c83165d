#!/usr/bin/env bash
# Why a ctest run's skipped tests skipped: the tests ctest listed as "(Skipped)" in its
# output (CTEST_OUTPUT), each with the reasons its own output gave (from the run's log,
# BUILD_DIR/Testing/Temporary/LastTest.log): the Criterion [SKIP] reasons, each different
# reason once with how many tests gave it, or for a test without them (a script that exits
# 77) its last line of output.
#
#     ctest ... | tee ctest.out; scripts/skip-reasons.sh BUILD_DIR ctest.out
set -euo pipefail
build=$1
out=$2
log=$build/Testing/Temporary/LastTest.log
names=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Skipped)$/\1/p' "$out")
[ -n "$names" ] || exit 0
[ -f "$log" ] || { echo "skip-reasons: no $log" >&2; exit 1; }
echo "why the skipped tests skipped:"
for t in $names; do
	echo "  $t:"
	awk -v t="$t" '
		/^[0-9]+\/[0-9]+ Testing: / { on = $3 == t; next }
		!on { next }
		/^Output:/ { inout = 1; next }
		/^<end of output>/ { inout = 0; next }
		!inout { next }
		/^\[SKIP\] / {
			r = $0; sub(/^\[SKIP\] [^ ]*: /, "", r)
			if (!(r in n)) order[++k] = r
			n[r]++; next
		}
		NF && !/^-+$/ { last = $0 }
		END {
			if (!k) { print "    " last; exit }
			for (i = 1; i <= k; i++)
				printf "    %d test%s: %s\n", n[order[i]], (n[order[i]] > 1 ? "s" : ""), order[i]
		}' "$log"
done
