#!/usr/bin/env bash
# Validates and measures zinc's CUDA side in one run on a lent GPU machine that has nvcc,
# CMake, a C compiler and the driver but none of Debian's -dev packages and no network.
#
#   scripts/device/fetch-debs.sh          # here, once: .debs/ (carried to the device)
#   scripts/device/gpu-check.sh           # there: logs and summary.txt in $OUT
#
# Prerequisites are checked first and the script stops at the first one missing, with one
# line "gpu-check: STOP: ..." and exit 1, within seconds: the mode's value, .debs/ holding
# every package of debs.list, in GPU mode a GPU nvidia-smi lists, an nvcc, and a driver
# whose CUDA version is not older than nvcc's; then the sysroot, the configure (every
# pkg-config module from the sysroot; in GPU mode "CUDA ON"), a built zinc and, in GPU
# mode, a CUDA device `zinc info` sees. After that each step runs under `timeout`, cut to
# what is left of ONE budget for the whole call, ZN_GPU_CHECK_BUDGET_S (default 420 s),
# and a failing step does not stop the next. The steps run the most valuable first (the
# GPU kernel tests against the CPU, copy bandwidths, a Llama step's MFU, GPT-2, an
# NVMe-offloaded step, the 8B-shaped Llama; docs/gpu-check.md has the table), and every
# figure is written to $OUT/summary.txt (and stdout) as soon as its step ends, so a run cut
# short still reports what it measured.
#
# Every .deb in $ZN_DEBS (default .debs) is unpacked with dpkg -x into a private sysroot
# ($ZN_SYSROOT, default /tmp/zsys; never /; scripts/device/sysroot.sh). pkgconf from the
# sysroot sees ONLY the sysroot's .pc files (PKG_CONFIG_LIBDIR) and prefixes their /usr
# paths with the sysroot (PKG_CONFIG_SYSROOT_DIR).
#
# ZN_GPU_CHECK_DRY: 1 or true = dry run (build with CUDA off from the sysroot, prove the
# sysroot was used, train and measure on the host device at tiny shapes; the GPU tests run
# and skip); 0 or false = GPU mode, forced; unset or empty = GPU mode when nvidia-smi is
# found (on PATH, else in ZN_GPU_CHECK_SMI_DIRS, default "/usr/local/nvidia/bin /usr/bin"),
# else a dry run.
# ZN_GPU_CHECK_UNTIL=configure stops with exit 0 after the configure and its checks (the
# CPU test devcheck/sysroot_configure_from_debs_alone).
# ZN_GPU_CHECK_STEPS="name ..." runs only the named steps after the build (a rerun);
# ZN_GPU_CHECK_REUSE=1 keeps the sysroot and build of an earlier run on the same machine.
# ZN_GPU_CHECK_CTEST="-R regex" narrows the full ctest step (dry runs on small machines).
# Sourcing the script defines its functions and runs nothing (for tests).
set -uo pipefail
OUT=${OUT:-/tmp/zn-gpu-check-out}
S=${ZN_SYSROOT:-/tmp/zsys}
B=${ZN_BUILD:-build-gpu}
D=${ZN_DEBS:-.debs}
budget_s=${ZN_GPU_CHECK_BUDGET_S:-420}
nvme_dir=${ZN_GPU_CHECK_NVME_PATH:-/var/tmp/zn-gpu-check-nvme}
t0=$(date +%s)
dry=""
hold_pid=""
cuda_line=""
measuring=""
step_ran=""
jobs=$(nproc)
# the sysroot, the configure and their checks
. "$(dirname "${BASH_SOURCE[0]}")/sysroot.sh"

now() {
	date +%s
}

# say LINE...: lines of the summary (empty ones left out), printed and appended to
# $OUT/summary.txt at once, so a run cut short keeps every line said before the cut
say() {
	local l
	for l in "$@"; do
		[ -n "$l" ] || continue
		printf '%s\n' "$l"
		[ ! -d "$OUT" ] || printf '%s\n' "$l" >> "$OUT/summary.txt"
	done
}

# say_stdin: say the lines read from stdin
say_stdin() {
	local l
	while IFS= read -r l; do
		say "$l"
	done
}

# stop WHAT: the one line saying which prerequisite is missing, then exit 1
stop() {
	say "gpu-check: STOP: $*"
	[ -z "$hold_pid" ] || kill "$hold_pid" 2> /dev/null
	exit 1
}

# pick_mode: sets dry ("" = GPU mode, 1 = dry) from ZN_GPU_CHECK_DRY and the nvidia-smi
# search, and puts the folder of the nvidia-smi found on PATH. Stops on a bad value.
pick_mode() {
	local v=${ZN_GPU_CHECK_DRY:-} d smi=""
	case "$v" in
	1 | true | TRUE | True) dry=1 ;;
	0 | false | FALSE | False | "") dry="" ;;
	*) stop "ZN_GPU_CHECK_DRY='$v': use 1 or true (dry run), 0 or false (GPU mode, forced), or leave it unset (GPU mode when nvidia-smi is found)" ;;
	esac
	case "${ZN_GPU_CHECK_UNTIL:-}" in
	"" | configure) ;;
	*) stop "ZN_GPU_CHECK_UNTIL='$ZN_GPU_CHECK_UNTIL': use configure, or leave it unset" ;;
	esac
	[ -z "$dry" ] || return 0
	smi=$(command -v nvidia-smi)
	if [ -z "$smi" ]; then
		for d in ${ZN_GPU_CHECK_SMI_DIRS-/usr/local/nvidia/bin /usr/bin}; do
			if [ -x "$d/nvidia-smi" ]; then
				smi=$d/nvidia-smi
				export PATH=$PATH:$d
				break
			fi
		done
	fi
	if [ -z "$smi" ] && [ -z "$v" ]; then
		dry=1 # auto: no GPU tools here
		echo "gpu-check: no nvidia-smi on PATH or in ${ZN_GPU_CHECK_SMI_DIRS-/usr/local/nvidia/bin /usr/bin}: dry run"
	fi
	return 0
}

# version_older A B: A < B, both MAJOR.MINOR
version_older() {
	local a1=${1%%.*} a2=${1#*.} b1=${2%%.*} b2=${2#*.}
	[ "$a1" -lt "$b1" ] || { [ "$a1" -eq "$b1" ] && [ "$a2" -lt "$b2" ]; }
}

# driver_vs_runtime: stops when the CUDA version the driver supports (nvidia-smi's
# header) is older than nvcc's release: the runtime zinc links would refuse every call
# (cudaErrorInsufficientDriver), and the build alone costs minutes of the window. Sets
# cuda_line for the summary; versions it cannot read are said, not guessed.
driver_vs_runtime() {
	local nvcc drv_cuda drv nv
	nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	drv_cuda=$(timeout 20 nvidia-smi 2> /dev/null | grep -oE 'CUDA Version: *[0-9]+\.[0-9]+' |
		grep -oE '[0-9]+\.[0-9]+$' | head -1)
	drv=$(timeout 20 nvidia-smi 2> /dev/null | grep -oE 'Driver Version: *[0-9.]+' |
		grep -oE '[0-9.]+$' | head -1)
	nv=$(timeout 20 "$nvcc" --version 2> /dev/null | grep -oE 'release [0-9]+\.[0-9]+' |
		grep -oE '[0-9.]+$' | head -1)
	if [ -z "$drv_cuda" ] || [ -z "$nv" ]; then
		cuda_line="driver ${drv:-?} (CUDA ${drv_cuda:-unknown}), nvcc release ${nv:-unknown}: not compared"
		return 0
	fi
	! version_older "$drv_cuda" "$nv" ||
		stop "the driver (${drv:-version unknown}) supports CUDA $drv_cuda, older than nvcc's release $nv: every CUDA call would fail (cudaErrorInsufficientDriver); use a machine with a newer driver or a CUDA $drv_cuda toolkit"
	cuda_line="driver ${drv:-?} supports CUDA $drv_cuda, nvcc release $nv: ok"
}

# gpu_prereqs: in GPU mode, a GPU nvidia-smi can see, an nvcc, a driver not older than it
gpu_prereqs() {
	local smi out rc
	smi=$(command -v nvidia-smi)
	[ -n "$smi" ] || stop "GPU mode (ZN_GPU_CHECK_DRY=${ZN_GPU_CHECK_DRY:-unset}) but no nvidia-smi on PATH or in ${ZN_GPU_CHECK_SMI_DIRS-/usr/local/nvidia/bin /usr/bin}: no driver here; set ZN_GPU_CHECK_DRY=1 for a dry run"
	out=$(timeout 20 "$smi" -L 2>&1)
	rc=$?
	if [ "$rc" -ne 0 ] || ! grep -q '^GPU [0-9]' <<< "$out"; then
		stop "GPU mode but '$smi -L' lists no GPU (rc $rc): $(head -1 <<< "$out")"
	fi
	echo "gpu-check: GPU mode: $(grep -m1 '^GPU [0-9]' <<< "$out") (nvidia-smi at $smi)"
	command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
		stop "GPU mode but no nvcc on PATH or in /usr/local/cuda/bin: install the CUDA toolkit or set ZN_GPU_CHECK_DRY=1"
	driver_vs_runtime
}

# last_line LOG: the last line of LOG that says something, for a stop line
last_line() {
	grep -v '^=====' "$1" 2> /dev/null | grep -v '^ *$' | tail -1
}

left_s() {
	echo $((budget_s - ($(now) - t0)))
}

# step NAME LIMIT_S LOG CMD...: runs CMD under timeout (at most what the budget has left),
# appending its output to $OUT/LOG, says its line in the summary and returns its exit
# status (1 when the budget was spent or ZN_GPU_CHECK_STEPS leaves it out). step_ran
# says whether it ran (if_ran).
step() {
	local name=$1 limit=$2 logname=$3 log=$OUT/$3 rc start left took verdict
	shift 3
	step_ran=""
	if [ -n "$measuring" ] && [ -n "${ZN_GPU_CHECK_STEPS:-}" ] &&
	   ! grep -qw -- "$name" <<< "$ZN_GPU_CHECK_STEPS"; then
		return 1
	fi
	left=$(left_s)
	[ "$limit" -le "$left" ] || limit=$left
	if [ "$limit" -lt 5 ]; then
		say "$(printf '%-22s SKIP (budget spent)' "$name")"
		return 1
	fi
	step_ran=1
	start=$(now)
	printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" >> "$log"
	if declare -F "$1" > /dev/null; then
		# a function of this script: timeout needs a program, so run it in bash
		timeout -k 10 "$limit" bash -c '"$@"' step "$@" >> "$log" 2>&1 < /dev/null
	else
		timeout -k 10 "$limit" "$@" >> "$log" 2>&1 < /dev/null
	fi
	rc=$?
	took=$(($(now) - start))
	printf '===== %s: rc %s in %ss\n' "$name" "$rc" "$took" >> "$log"
	verdict=ok
	[ "$rc" -eq 0 ] || verdict="FAIL rc $rc"
	[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || verdict="TIMEOUT after ${limit}s"
	say "$(printf '%-22s %-22s %4ss  %s' "$name" "$verdict" "$took" "$logname")"
	return "$rc"
}

# if_ran CMD...: CMD (a figure of the step just run) unless that step was left out
if_ran() {
	[ -z "$step_ran" ] || "$@"
}

# section LOG NAME: the output of step NAME's last run in $OUT/LOG
section() {
	awk -v h="===== $2 (limit" -v e="===== $2: rc" '
		index($0, h) == 1 { s = ""; on = 1 }
		on { s = s $0 "\n" }
		index($0, e) == 1 { on = 0 }
		END { printf "%s", s }' "$OUT/$1" 2> /dev/null
}

# cuda_device_seen: GPU mode: stops unless `zinc info` lists a CUDA device it opened; a
# build whose runtime cannot reach the GPU would otherwise turn every GPU test into a skip
cuda_device_seen() {
	local out gpu
	out=$(timeout 60 "$B/zinc" info --nvme-path "$nvme_dir" 2>&1)
	printf '\n===== zinc info\n%s\n' "$out" >> "$OUT/setup.log"
	gpu=$(grep -E '^ +gpu [0-9]+: ' <<< "$out" | grep -v 'could not be opened' | head -1)
	[ -n "$gpu" ] ||
		stop "GPU mode but '$B/zinc info' reports no CUDA device: $(grep -m1 -E '^ *gpus?\b' <<< "$out" || last_line <(echo "$out")) (setup.log)"
	say "zinc info: $(echo $gpu)"
}

train() {
	local dev=cuda
	[ -z "$dry" ] || dev=host
	[ "${1:-}" != --host ] || { dev=host; shift; }
	# debug level for the engine's "plan: device N bytes" and the arena's line
	ZINC_LOG=debug "$B/zinc" train --device $dev --data data/demo.txt --model small \
		--micro-batch 2 --seq 128 --steps 50 "$@"
}

# An NVMe-offloaded step (ZeRO-Infinity: optimizer state and parameters on NVMe) next to
# its bound (docs/bench-step.md); GPT-2 124M in bf16 keeps the step's I/O near 2 GB.
nvme_step() {
	local dev=cuda model=(--model gpt2 --seq 1024 --micro-batch 8 --dtype bf16) rc
	[ -z "$dry" ] || { dev=host; model=(--model tiny --seq 64 --micro-batch 1); }
	rm -rf "$nvme_dir"
	mkdir -p "$nvme_dir"
	ZINC_LOG=debug "$B/zinc" bench step --device $dev "${model[@]}" --zero-stage 3 \
		--offload-optimizer nvme --offload-param nvme --nvme-path "$nvme_dir" --bw max \
		--warmup 1 --steps 3
	rc=$?
	rm -rf "$nvme_dir"
	return $rc
}

# The GPU tests, each Criterion binary once, optimizer tests first, a CUDA context held
# meanwhile. Binaries that are not built (a test still being written) are left out. In
# GPU mode a skipped test is a failure: on the device every GPU test must run.
gpu_tests() {
	local t rc=0 r f skips order="test_gpu_optim test_gpu_kernels test_gpu_kernels_llama test_gpu_kernels_bf16 test_gpu_kernels_flash test_gpu_kernels_flash_doc test_gpu_kernels_flash_tc test_gpu_kernels_lora test_gpu_device"
	for t in "$B"/test_gpu_* "$B"/test_cuda_*; do
		[ -x "$t" ] || continue
		t=${t##*/}
		grep -qw "$t" <<< "$order" || order+=" $t"
	done
	f=$(mktemp)
	for t in $order; do
		if [ ! -x "$B/$t" ]; then
			echo "gpu-tests: $t not built: left out"
			continue
		fi
		echo "gpu-tests: $t"
		"$B/$t" --jobs 1 --timeout 60 --verbose -S 2>&1 | tee "$f"
		r=${PIPESTATUS[0]}
		[ "$r" -eq 0 ] || rc=1
		echo "gpu-tests: $t: rc $r, $(grep -m1 -o 'Tested: .*' "$f" || echo 'no Synthesis line')"
		skips=$(grep -c '^\[SKIP\]' "$f")
		if [ -z "$dry" ] && [ "$skips" -gt 0 ]; then
			echo "gpu-tests: $t: $skips tests SKIPPED, a failure in GPU mode: $(grep -m1 '^\[SKIP\]' "$f")"
			rc=1
		fi
	done
	rm -f "$f"
	return $rc
}

hold_gpu() {
	cc -O1 -I/usr/local/cuda/include scripts/device/gpu-hold.c -L/usr/local/cuda/lib64 \
		-Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o "$B/gpu-hold" >> "$OUT/ctest-gpu.log" 2>&1 ||
		return 0
	"$B/gpu-hold" >> "$OUT/ctest-gpu.log" 2>&1 &
	hold_pid=$!
}

release_gpu() {
	[ -z "$hold_pid" ] || kill "$hold_pid" 2> /dev/null
	hold_pid=""
}

# ---- the summary's figures, each said right after the step that measured it ------------

say_gpu_tests() {
	local log=$OUT/ctest-gpu.log
	say "--- GPU tests (one line per binary; in GPU mode a skip fails)"
	say "$(grep -hE '^gpu-tests: [^ ]+: |gpu-hold:' "$log" 2> /dev/null | sed 's/^gpu-tests: //; s/^/  /')"
	say "--- CUDA vs CPU: worst error per op (x tolerance; <= 1 passes)"
	say "$(awk '/^gpu-vs-cpu: / { op = $2; v = $NF + 0; if (!(op in w) || v > w[op]) { w[op] = v; l[op] = $0 } }
	     END { for (op in l) print l[op] }' "$log" 2> /dev/null | sort | sed 's/^gpu-vs-cpu: /  /')"
	say "--- copies (GB/s; pinned: cudaHostAlloc, pageable: malloc)"
	say "$(grep -h '^copy-bw: ' "$log" 2> /dev/null | sed 's/^copy-bw: /  /')"
}

# say_mfu RUN: the run's MFU line (scripts/device/mfu.sh)
say_mfu() {
	local l
	l=$(section mfu.log "mfu-$1" | grep "^mfu: $1 " | tail -1)
	say "  ${l:-mfu: $1: no figure (mfu.log)}"
}

# say_train STEP: loss first -> last, tok/s of the last step, device peak vs plan
say_train() {
	section train.log "$1" | awk -v run="$1" '
	     /plan: device [0-9]+ bytes/ { for (i = 1; i <= NF; i++) if ($i == "device") plan = $(i + 1) / 1048576 }
	     /^step / { split($0, f, "|"); sub(/^ *loss /, "", f[2]); sub(/ *$/, "", f[2]); sub(/ tok\/s */, "", f[3]);
	                sub(/^ *dev peak /, "", f[5]); sub(/ MiB */, "", f[5]);
	                if (first == "") first = f[2]; last = f[2]; tps = f[3]; peak = f[5] }
	     END { if (first == "") { printf "  %-22s no step line\n", run; exit }
	           printf "  %-22s loss %s -> %s  %8s tok/s  dev peak %s MiB of plan %.1f MiB\n",
	                  run, first, last, tps, peak, plan }' | say_stdin
}

# say_pinning LOG STEP: how the step's largest pinned arena was pinned, and how fast; a
# refused or slow cudaHostRegister makes every overlap figure of the run meaningless
say_pinning() {
	local l
	l=$(section "$1" "$2" | awk '/arena: [0-9]+ bytes on NUMA node/ {
		for (i = 1; i <= NF; i++) if ($i == "arena:") b = $(i + 1)
		if (b + 0 >= best) { best = b + 0; line = $0 } } END { print line }')
	if [ -z "$l" ]; then
		say "  pinning ($2): no arena line (no host memory in this run)"
		return 0
	fi
	awk -v step="$2" -v dry="$dry" '{
		for (i = 1; i <= NF; i++) { if ($i == "arena:") b = $(i + 1); if ($i == "in" && how == "") { how = $(i - 1); s = $(i + 1) } }
		sub(/,$/, "", how); gib = b / 1073741824; rate = s > 0 ? gib / s : 0
		if (how == "cudaHostRegister") {
			v = rate > 0 && rate < 2 ? "SLOW (under 2 GiB/s): a large arena costs minutes to pin" : "ok"
			printf "  pinning (%s): cudaHostRegister of %.2f GiB in %s s (%.1f GiB/s): %s\n", step, gib, s, rate, v
		} else if (dry != "") {
			printf "  pinning (%s): %s of %.2f GiB in %s s (host device: no cudaHostRegister in a dry run)\n", step, how, gib, s
		} else {
			printf "  pinning (%s): REFUSED: cudaHostRegister failed, the arena (%.2f GiB) is %s: copies from pageable memory are synchronous, so no overlap figure of this run means anything\n", step, gib, how
		}
	}' <<< "$l" | say_stdin
	section "$1" "$2" | grep -m2 -E 'cudaHostRegister.*failed|mlock after' | sed 's/^/    /' |
		say_stdin
}

say_nvme_step() {
	local s
	s=$(section bench.log nvme-step | grep -E '^# (zinc bench step|device|pinned copy|bound|knee)|^#? *cap |^ +[0-9]+[KMG]? |^ +max ' | cut -c1-190)
	say "${s:-  nvme-step: no table (bench.log)}"
}

# keeps a log that grew past 15 MiB to its first 1 and last 13 MiB
trim_logs() {
	local f
	for f in "$OUT"/*; do
		[ "$(stat -c %s "$f")" -le $((15 << 20)) ] && continue
		{ head -c $((1 << 20)) "$f"; echo; echo "... trimmed ..."; tail -c $((13 << 20)) "$f"; } > "$f.t"
		mv "$f.t" "$f"
	done
}

# export_env: what the steps' child processes (functions run under timeout, mfu.sh) use
export_env() {
	export OUT S B D dry repo nvme_dir
	export ZN_SYSROOT=$S ZN_BUILD=$B ZN_MFU_DRY=$dry
	export -f make_sysroot relink_to_system deb_data deb_list deb_unpack deb_sonames \
		show_env pc_modules pc_libs configure check_sysroot_use train nvme_step gpu_tests
}

# ---- the plan -------------------------------------------------------------------------

# prepare: the sysroot, the configure and the build, each stopping the run when it fails
prepare() {
	if [ -n "${ZN_GPU_CHECK_REUSE:-}" ] && [ -x "$B/zinc" ] && [ -x "$S/usr/bin/pkgconf" ]; then
		say "reusing $S and $B (ZN_GPU_CHECK_REUSE)"
		setup_env
		return 0
	fi
	step sysroot 60 setup.log make_sysroot ||
		stop "sysroot step failed: $(last_line "$OUT/setup.log") (setup.log)"
	setup_env
	step env 20 setup.log show_env
	[ -n "$dry" ] || step nvidia-smi 20 setup.log nvidia-smi
	step configure 120 setup.log configure ||
		stop "configure failed: $(configure_error "$OUT/setup.log") (setup.log)"
	say "$(grep -A14 'zinc .* configuration' "$OUT/setup.log" | sed 's/^-- //' | tail -15)"
	[ -n "$dry" ] || configured_cuda "$OUT/setup.log"
	configured_from_sysroot
	say "configure: every pkg-config module of CMakeLists.txt from the sysroot"
	if [ "${ZN_GPU_CHECK_UNTIL:-}" = configure ]; then
		say "gpu-check: configured from $D alone; stopping there (ZN_GPU_CHECK_UNTIL=configure)"
		exit 0
	fi
	# -k: a test that does not compile costs that test only. No limit of its own: nothing
	# runs without the build, so it may take what the budget has left.
	local rc=0
	step build "$budget_s" build.log cmake --build "$B" -j"$jobs" -- -k || rc=$?
	[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] ||
		stop "the build ran past the budget ($budget_s s, ZN_GPU_CHECK_BUDGET_S): $(last_line "$OUT/build.log") (build.log)"
	[ -x "$B/zinc" ] || stop "build failed, no $B/zinc: $(grep -m1 -E 'error' "$OUT/build.log") (build.log)"
}

# measure: every step after the build, the most valuable figure first; each says its
# figures as soon as it ends
measure() {
	measuring=1
	export_env
	# 1. the GPU kernels against the CPU reference, copy bandwidth pinned and pageable
	[ -n "$dry" ] || hold_gpu
	step gpu-tests 150 ctest-gpu.log gpu_tests
	release_gpu
	if_ran say_gpu_tests
	# 2. a Llama step: MFU
	step mfu-llama-1b 75 mfu.log bash scripts/device/mfu.sh llama-1b
	if_ran say_mfu llama-1b
	# 3. GPT-2: zinc train on cuda against the host device, stage 3 with cpu offload, MFU
	step train-stage0 45 train.log train --zero-stage 0
	if_ran say_train train-stage0
	if [ -z "$dry" ]; then
		step train-host-stage0 30 train.log train --host --zero-stage 0
		if_ran say_train train-host-stage0
	fi
	step train-stage3-offload 60 train.log train --zero-stage 3 --offload-optimizer cpu \
		--offload-param cpu
	if_ran say_train train-stage3-offload
	if_ran say_pinning train.log train-stage3-offload
	step mfu-gpt2-xl 75 mfu.log bash scripts/device/mfu.sh gpt2-xl
	if_ran say_mfu gpt2-xl
	# 4. an NVMe-offloaded training step next to its bound
	step nvme-step 90 bench.log nvme_step
	if_ran say_nvme_step
	if_ran say_pinning bench.log nvme-step
	# 5. the 8B-shaped Llama, 2 layers: tok/s and MFU
	step mfu-llama-8b-2l 90 mfu.log bash scripts/device/mfu.sh llama-8b-2l
	if_ran say_mfu llama-8b-2l
	# 6. as the budget allows
	step mfu-gpt2-xl-offload 75 mfu.log bash scripts/device/mfu.sh gpt2-xl-offload
	if_ran say_mfu gpt2-xl-offload
	step mfu-gpt2-xl-fp32 75 mfu.log bash scripts/device/mfu.sh gpt2-xl-fp32
	if_ran say_mfu gpt2-xl-fp32
	step sysroot-used 20 setup.log check_sysroot_use
	step bench-adam 45 bench.log "$B/zinc" bench adam --params 64M
	if_ran say "$(section bench.log bench-adam | grep -E '^ +[0-9]|^# (engine|best|arena|machine)' | cut -c1-150 | head -8)"
	# shellcheck disable=SC2086 # ZN_GPU_CHECK_CTEST is a list of ctest arguments
	step ctest-all 400 ctest-all.log ctest --test-dir "$B" --output-on-failure -j"$jobs" \
		--timeout 300 -LE gpu ${ZN_GPU_CHECK_CTEST:-}
	if_ran say "$(grep -hE 'tests passed|tests failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Not Run|\*\*\*Skipped' \
		"$OUT"/ctest-all.log 2>/dev/null | head -20)"
}

main() {
	cd "$(dirname "$0")/../.." || exit 1
	repo=$PWD
	pick_mode
	mkdir -p "$OUT"
	rm -f "$OUT/summary.txt"
	ls "$D"/*.deb > /dev/null 2>&1 ||
		stop "no $D/*.deb in $repo: run scripts/device/fetch-debs.sh here and carry .debs"
	local m
	m=$(debs_missing)
	[ -z "$m" ] ||
		stop "$D lacks ${m% } of scripts/device/debs.list: run scripts/device/fetch-debs.sh again here and carry .debs"
	[ -n "$dry" ] || gpu_prereqs
	export_env

	say "zinc gpu-check $(git -C "$repo" rev-parse --short HEAD 2>/dev/null): dry=${dry:-0}, budget $budget_s s for the whole call, $(nproc) cores"
	[ -n "$dry" ] || say "cuda: $cuda_line"
	say "nccl: not tested: one GPU, and the check builds -DZINC_MPI=OFF (zinc's NCCL backend needs MPI); multi-rank and NCCL stay unverified"
	prepare
	mkdir -p "$nvme_dir" # zinc info says its filesystem and O_DIRECT; nvme-step uses it
	if [ -n "$dry" ]; then
		step zinc-info 20 setup.log "$B/zinc" info --nvme-path "$nvme_dir"
	else
		cuda_device_seen
	fi
	measure
	rm -rf "$nvme_dir"
	say "gpu-check: done in $(($(now) - t0)) s of $budget_s s"
	trim_logs
}

# sourced (tests): functions only
[ "${BASH_SOURCE[0]}" != "$0" ] || main "$@"
