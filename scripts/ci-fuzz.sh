#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan and UBSan) into
# ${BUILD_DIR:-build-fuzz} and runs each for ZINC_FUZZ_SECONDS (default 60) from its seed
# corpus tests/fuzz/corpus/<target>/, with the dictionary tests/fuzz/<target>.dict if any.
# A crash, leak, sanitizer report, timeout or broken invariant fails the script and leaves
# the input as build-fuzz/artifacts/<target>-crash-*: fix the parser, then copy the file
# into tests/fuzz/corpus/<target>/ so the normal suite replays it (fuzz_replay_<target>).
# New coverage the fuzzers find stays in build-fuzz/corpus/<target>/ (the repository's
# corpus is only read). docs/testing.md has the details.
#
#     scripts/ci-fuzz.sh                        # every target, 60 s each
#     ZINC_FUZZ_SECONDS=600 scripts/ci-fuzz.sh safetensors
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-fuzz}
secs=${ZINC_FUZZ_SECONDS:-60}
mkdir -p "$build"
CC=${ZINC_FUZZ_CC:-clang} cmake -S . -B "$build" -DZINC_FUZZ=ON -DZINC_CUDA=OFF -DZINC_MPI=OFF \
	> "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target fuzzers -j"$(nproc)" > "$build/build.log" 2>&1 ||
	{ tail -50 "$build/build.log"; exit 1; }
built=$(cd "$build" && find . -maxdepth 1 -type f -executable -name 'fuzz_*' | sed 's|^./fuzz_||' | sort)
targets=${*:-$built}
status=0
for t in $targets; do
	[ -x "$build/fuzz_$t" ] || { echo "ci-fuzz: no target fuzz_$t (built: $(echo $built))"; exit 2; }
	mkdir -p "$build/corpus/$t" "$build/artifacts"
	log=$build/fuzz_$t.log
	dict=()
	[ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
	# -close_fd_mask=2: the parsers' error lines would fill the log; libFuzzer and the
	# sanitizers still report there.
	if HWLOC_COMPONENTS=-pci "$build/fuzz_$t" -max_total_time="$secs" -max_len=16384 \
		-timeout=20 -rss_limit_mb=4096 -print_final_stats=1 -close_fd_mask=2 "${dict[@]}" \
		-artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "tests/fuzz/corpus/$t" \
		> "$log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
		echo "ci-fuzz: $t clean: $runs inputs in ${secs} s, corpus $(ls "$build/corpus/$t" | wc -l) new files"
	else
		echo "ci-fuzz: $t FAILED ($log):"
		grep -E "ERROR|runtime error|fuzz: invariant|Test unit written" "$log" | head -20
		status=1
	fi
done
exit $status
