#!/usr/bin/env bash
# Validates zinc's CUDA side in one run on a lent GPU machine that has nvcc, CMake, a C
# compiler and the driver but none of Debian's -dev packages and no network.
#
#   scripts/device/fetch-debs.sh          # here, once: .debs/ (carried to the device)
#   scripts/device/gpu-check.sh           # there: logs in $OUT, summary at the end
#
# Prerequisites are checked first and the script stops at the first one missing, with one
# line "gpu-check: STOP: ..." and exit 1, within seconds: the mode's value, .debs/, in GPU
# mode a working nvidia-smi and nvcc; then the sysroot, the configure (and in GPU mode
# "CUDA ON" in its summary) and a built zinc. After that each step runs under `timeout`,
# cut to what is left of ZN_GPU_CHECK_BUDGET_S (default 450 s), and a failing step does
# not stop the next. The GPU tests run first (optimizer tests first among them), each
# Criterion binary once, with scripts/device/gpu-hold.c holding a CUDA context meanwhile;
# the full ctest step leaves the gpu label out.
#
# Every .deb in .debs/ is unpacked with dpkg -x into a private sysroot ($ZN_SYSROOT,
# default /tmp/zsys; never /). pkgconf from the sysroot sees ONLY the sysroot's .pc files
# (PKG_CONFIG_LIBDIR) and prefixes their /usr paths with the sysroot
# (PKG_CONFIG_SYSROOT_DIR).
#
# ZN_GPU_CHECK_DRY: 1 or true = dry run (build with CUDA off from the sysroot, prove the
# sysroot was used, train on the host device; the GPU tests run and skip); 0 or false =
# GPU mode, forced; unset or empty = GPU mode when nvidia-smi is found (on PATH, else in
# ZN_GPU_CHECK_SMI_DIRS, default "/usr/local/nvidia/bin /usr/bin"), else a dry run.
# ZN_GPU_CHECK_CTEST="-R regex" narrows the full ctest step (dry runs on small machines).
# Sourcing the script defines its functions and runs nothing (for tests).
set -uo pipefail
OUT=${OUT:-/tmp/zn-gpu-check-out}
S=${ZN_SYSROOT:-/tmp/zsys}
B=${ZN_BUILD:-build-gpu}
budget_s=${ZN_GPU_CHECK_BUDGET_S:-450}
t0=$(date +%s)
dry=""
summary=()
hold_pid=""

# stop WHAT: the one line saying which prerequisite is missing, then exit 1
stop() {
	local line="gpu-check: STOP: $*"
	echo "$line"
	if [ -d "$OUT" ]; then
		echo "$line" >> "$OUT/summary.txt"
	fi
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

# gpu_prereqs: in GPU mode, a GPU nvidia-smi can see and an nvcc; stops otherwise
gpu_prereqs() {
	local smi out rc
	smi=$(command -v nvidia-smi)
	[ -n "$smi" ] || stop "GPU mode (ZN_GPU_CHECK_DRY=${ZN_GPU_CHECK_DRY:-unset}) but no nvidia-smi on PATH or in ${ZN_GPU_CHECK_SMI_DIRS-/usr/local/nvidia/bin /usr/bin}: no driver here; set ZN_GPU_CHECK_DRY=1 for a dry run"
	out=$(timeout 20 "$smi" -L 2>&1)
	rc=$?
	if [ "$rc" -ne 0 ] || ! grep -q '^GPU [0-9]' <<< "$out"; then
		stop "GPU mode but '$smi -L' lists no GPU (rc $rc): $(head -1 <<< "$out")"
	fi
	echo "gpu-check: GPU mode: $(head -1 <<< "$out") (nvidia-smi at $smi)"
	command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
		stop "GPU mode but no nvcc on PATH or in /usr/local/cuda/bin: install the CUDA toolkit or set ZN_GPU_CHECK_DRY=1"
}

# configured_cuda LOG: stops unless the configure summary in LOG says "CUDA ON"
configured_cuda() {
	local line
	line=$(grep -E '^(-- )?  CUDA ' "$1" | tail -1 | sed 's/^-- //')
	[ -n "$line" ] || stop "the configure summary has no CUDA line (see $1)"
	grep -qE '^ *CUDA +ON( |$)' <<< "$line" ||
		stop "GPU mode but the configure summary says '$(echo $line)': CMake found no usable nvcc (see $1)"
}

# last_lines LOG: the last line of LOG that says something, for a stop line
last_line() {
	grep -v '^=====' "$1" 2> /dev/null | grep -v '^ *$' | tail -1
}

left_s() {
	echo $((budget_s - ($(date +%s) - t0)))
}

# step NAME LIMIT_S LOG CMD...: runs CMD under timeout (at most what the budget has left),
# appending its output to $OUT/LOG, records the exit status for the summary and returns it
# (1 when the budget was spent).
step() {
	local name=$1 limit=$2 logname=$3 log=$OUT/$3 rc start
	shift 3
	local left
	left=$(left_s)
	[ "$limit" -le "$left" ] || limit=$left
	if [ "$limit" -lt 5 ]; then
		summary+=("$(printf '%-22s SKIP (budget spent)' "$name")")
		return 1
	fi
	start=$(date +%s)
	printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" >> "$log"
	if declare -F "$1" > /dev/null; then
		# a function of this script: timeout needs a program, so run it in bash
		timeout -k 10 "$limit" bash -c '"$@"' step "$@" >> "$log" 2>&1 < /dev/null
	else
		timeout -k 10 "$limit" "$@" >> "$log" 2>&1 < /dev/null
	fi
	rc=$?
	local took=$(($(date +%s) - start))
	printf '===== %s: rc %s in %ss\n' "$name" "$rc" "$took" >> "$log"
	local verdict=ok
	[ "$rc" -eq 0 ] || verdict="FAIL rc $rc"
	[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || verdict="TIMEOUT after ${limit}s"
	summary+=("$(printf '%-22s %-22s %4ss  %s' "$name" "$verdict" "$took" "$logname")")
	return "$rc"
}

# a .deb's file list and unpacking: dpkg-deb where there is one, else ar + tar
deb_data() {
	local t
	t=$(mktemp -d)
	(cd "$t" && ar x "$OLDPWD/$1" && ls data.tar*) | sed "s|^|$t/|"
}

deb_list() {
	local d
	if command -v dpkg-deb > /dev/null; then
		dpkg-deb -c "$1" | awk '{print $6}'
	else
		d=$(deb_data "$1")
		tar -t -f "$d"
		rm -rf "${d%/*}"
	fi
}

deb_unpack() {
	local d
	if command -v dpkg > /dev/null; then
		dpkg -x "$1" "$2"
	else
		d=$(deb_data "$1")
		tar -x -f "$d" -C "$2"
		rm -rf "${d%/*}"
	fi
}

# sonames (libfoo.so.N) a .deb ships
deb_sonames() {
	deb_list "$1" | grep -oE 'lib[^/]*\.so\.[0-9]+$' | sort -u
}

# Unpacks core packages always and fallback packages only where the system lacks one of
# their sonames, so LD_LIBRARY_PATH never shadows a newer system library.
make_sysroot() {
	local list=scripts/device/debs.list kind pkg f missing so
	local sys_libs
	if ! ls .debs/*.deb > /dev/null 2>&1; then
		echo "no .debs/*.deb: run scripts/device/fetch-debs.sh here and carry .debs"
		return 1
	fi
	rm -rf "$S"
	mkdir -p "$S"
	sys_libs=$(ldconfig -p 2>/dev/null | awk '{print $1}' | sort -u)
	for f in .debs/*.deb; do
		pkg=${f##*/}
		pkg=${pkg%%_*}
		kind=$(awk -v p="$pkg" '!/^#/ { for (i = 2; i <= NF; i++) if ($i == p) print $1 }' "$list")
		if [ "$kind" = fallback ]; then
			missing=""
			for so in $(deb_sonames "$f"); do
				grep -qxF "$so" <<< "$sys_libs" || missing+=" $so"
			done
			if [ -z "$missing" ]; then
				echo "sysroot: $pkg skipped (system has its libraries)"
				continue
			fi
			echo "sysroot: $pkg unpacked (system lacks$missing)"
		elif [ "$kind" != core ]; then
			echo "sysroot: $pkg is not in $list: unpacked anyway"
		fi
		deb_unpack "$f" "$S" || return 1
	done
	# Requires.private (boxfort, libffi, libgit2, nanomsg) matters for static linking
	# only, but pkgconf resolves it for --cflags too, and those -dev packages are not
	# fetched: drop it from the sysroot's copy.
	sed -i '/^Requires.private:/d' "$S/usr/lib/x86_64-linux-gnu/pkgconfig/criterion.pc"
	echo "sysroot: $(du -sh "$S" | cut -f1) in $S"
}

setup_env() {
	local ma=x86_64-linux-gnu
	export PATH=/usr/local/cuda/bin:$PATH:$S/usr/bin
	export LD_LIBRARY_PATH=$S/usr/lib/$ma:$S/usr/lib/$ma/openblas-pthread:$S/lib/$ma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export PKG_CONFIG_LIBDIR=$S/usr/lib/$ma/pkgconfig:$S/usr/lib/$ma/openblas-pthread/pkgconfig:$S/usr/share/pkgconfig
	export PKG_CONFIG_SYSROOT_DIR=$S
	unset PKG_CONFIG_PATH
	export CMAKE_PREFIX_PATH=$S/usr
}

show_env() {
	echo "repo $repo, sysroot $S, build $B, dry=${dry:-0}, $(nproc) cores"
	uname -a
	head -4 /etc/os-release
	for t in cc gcc nvcc cmake; do
		printf '%-6s %s: ' "$t" "$(command -v $t || echo missing)"
		$t --version 2>&1 | head -1
	done
	echo "PATH=$PATH"
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	echo "PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR"
	echo "PKG_CONFIG_SYSROOT_DIR=$PKG_CONFIG_SYSROOT_DIR"
	local m
	for m in liburing hwloc libcjson criterion openblas; do
		echo "pkgconf $m $("$S/usr/bin/pkgconf" --modversion $m 2>&1): $("$S/usr/bin/pkgconf" --cflags --libs $m 2>&1)"
	done
}

configure() {
	local cuda=ON
	[ -z "$dry" ] || cuda=${ZN_GPU_CHECK_CUDA:-OFF}
	rm -rf "$B"
	cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZINC_CUDA="$cuda" \
		-DCMAKE_CUDA_ARCHITECTURES=90 -DZINC_MPI=OFF \
		-DPKG_CONFIG_EXECUTABLE="$S/usr/bin/pkgconf" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
}

# Fails unless zinc and a test link every pkg-config library from the sysroot, the compile
# lines put the sysroot's include dirs first, and zinc loads them from there with
# LD_LIBRARY_PATH unset (RUNPATH): the system's copies, if any, were not used.
check_sysroot_use() {
	local bad=0 lib link v test_link
	# the link line, and with CUDA as linker language its response files
	link=$(cat "$B"/CMakeFiles/zinc.dir/link.txt "$B"/CMakeFiles/zinc.dir/*.rsp 2>/dev/null)
	v=$(find "$B"/CMakeFiles -name 'test_*.dir' | head -1)
	test_link=$(cat "$v"/link.txt "$v"/*.rsp 2>/dev/null)
	for lib in liburing.so libhwloc.so libcjson.so openblas-pthread/libopenblas.so \
		   libcriterion.so; do
		v=$link
		[ "$lib" != libcriterion.so ] || v=$test_link
		if grep -qF -- "$S/usr/lib/x86_64-linux-gnu/$lib" <<< "$v"; then
			echo "links $S/usr/lib/x86_64-linux-gnu/$lib"
		else
			echo "does NOT link $lib from the sysroot: $v"
			bad=1
		fi
	done
	# imported targets pass their include dirs as -isystem: searched before /usr/include
	local inc=()
	for v in "$S/usr/include" "$S/usr/include/x86_64-linux-gnu/openblas-pthread" \
		 "$S/usr/include/cjson"; do
		if grep -qE -- "(-I|-isystem )$v( |\\\\?\")" "$B/compile_commands.json"; then
			echo "compile lines use $v"
		else
			echo "compile lines do NOT use $v"
			bad=1
		fi
		inc+=(-isystem "$v")
	done
	# where the compiler finds each header with those flags
	printf '#include <%s>\n' liburing.h hwloc.h cjson/cJSON.h cblas.h \
		criterion/criterion.h | cc "${inc[@]}" -M -x c - -o - |
		tr ' \\' '\n\n' | grep -E '/(liburing|hwloc|cJSON|cblas|criterion)\.h$' |
		while read -r v; do
			echo "header $v"
			case "$v" in "$S"/*) ;; *) echo "  ^ NOT from the sysroot"; exit 1 ;; esac
		done || bad=1
	echo "ldd $B/zinc (LD_LIBRARY_PATH unset):"
	env -u LD_LIBRARY_PATH ldd "$B/zinc" | grep -E 'uring|hwloc|cjson|blas|gfortran|gomp|cuda|not found'
	if env -u LD_LIBRARY_PATH ldd "$B/zinc" | grep -E 'uring|hwloc|cjson|openblas' |
	   grep -vqF "$S/"; then
		echo "zinc loads one of liburing, hwloc, cJSON, OpenBLAS from outside the sysroot"
		bad=1
	fi
	return $bad
}

train() {
	local dev=cuda
	[ -z "$dry" ] || dev=host
	[ "${1:-}" != --host ] || { dev=host; shift; }
	# debug level for the engine's "plan: device N bytes" line (3 lines in all)
	ZINC_LOG=debug "$B/zinc" train --device $dev --data data/demo.txt --model small \
		--micro-batch 2 --seq 128 --steps 50 "$@"
}

# The GPU tests, each Criterion binary once, optimizer tests first, a CUDA context held
# meanwhile. Binaries that are not built (a test still being written) are left out.
gpu_tests() {
	local t rc=0 order="test_gpu_optim test_gpu_kernels test_gpu_kernels_llama test_gpu_kernels_bf16 test_gpu_kernels_flash test_gpu_kernels_flash_doc test_gpu_kernels_flash_tc test_gpu_kernels_lora test_gpu_device"
	for t in "$B"/test_gpu_* "$B"/test_cuda_*; do
		[ -x "$t" ] || continue
		t=${t##*/}
		grep -qw "$t" <<< "$order" || order+=" $t"
	done
	for t in $order; do
		if [ ! -x "$B/$t" ]; then
			echo "gpu-tests: $t not built: left out"
			continue
		fi
		echo "gpu-tests: $t"
		"$B/$t" --jobs 1 --timeout 60 --ascii -S || rc=1
	done
	return $rc
}

hold_gpu() {
	cc -O1 -I/usr/local/cuda/include scripts/device/gpu-hold.c -L/usr/local/cuda/lib64 \
		-Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o "$B/gpu-hold" >> "$OUT/ctest-gpu.log" 2>&1 ||
		return 0
	"$B/gpu-hold" >> "$OUT/ctest-gpu.log" 2>&1 &
	hold_pid=$!
}

# The figures a reader wants, from the logs: CUDA against CPU, copy bandwidth, training.
figures() {
	echo "--- CUDA vs CPU: worst error per op (x tolerance; <= 1 passes)"
	awk '/^gpu-vs-cpu: / { op = $2; v = $NF + 0; if (!(op in w) || v > w[op]) { w[op] = v; l[op] = $0 } }
	     END { for (op in l) print l[op] }' "$OUT/ctest-gpu.log" 2> /dev/null | sort | sed 's/^gpu-vs-cpu: /  /'
	echo "--- copies (GB/s)"
	grep -h '^copy-bw: ' "$OUT/ctest-gpu.log" 2> /dev/null | sed 's/^copy-bw: /  /'
	echo "--- training: loss first -> last, tok/s (last step), device peak vs plan"
	awk '/^===== train-.*limit/ { run = $2; order[++n] = run }
	     /plan: device [0-9]+ bytes/ { for (i = 1; i <= NF; i++) if ($i == "device") plan[run] = $(i + 1) / 1048576 }
	     /^step / { split($0, f, "|"); sub(/^ *loss /, "", f[2]); sub(/ tok\/s */, "", f[4]);
	                sub(/^ *dev peak /, "", f[6]); sub(/ MiB */, "", f[6]);
	                if (!(run in first)) first[run] = f[2]; last[run] = f[2]; tps[run] = f[4]; peak[run] = f[6] }
	     END { for (i = 1; i <= n; i++) { r = order[i]; if (!(r in first)) { printf "  %-26s no step line\n", r; continue }
	           printf "  %-26s loss %s -> %s  %8s tok/s  dev peak %s MiB of plan %.1f MiB\n", r, first[r], last[r], tps[r], peak[r], plan[r] } }' \
		"$OUT/train.log" 2> /dev/null
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

main() {
	cd "$(dirname "$0")/../.." || exit 1
	repo=$PWD
	jobs=$(nproc)
	pick_mode
	mkdir -p "$OUT"
	rm -f "$OUT/summary.txt"
	ls .debs/*.deb > /dev/null 2>&1 ||
		stop "no .debs/*.deb in $repo: run scripts/device/fetch-debs.sh here and carry .debs"
	[ -n "$dry" ] || gpu_prereqs
	export OUT S B dry repo
	export -f make_sysroot deb_data deb_list deb_unpack deb_sonames show_env configure \
		check_sysroot_use train gpu_tests

	# ---- prerequisites that take a step: stop at the first that fails ----------------
	step sysroot 60 setup.log make_sysroot ||
		stop "sysroot step failed: $(last_line "$OUT/setup.log") (setup.log)"
	setup_env
	step env 20 setup.log show_env
	[ -n "$dry" ] || step nvidia-smi 20 setup.log nvidia-smi
	step configure 120 setup.log configure ||
		stop "configure failed: $(last_line "$OUT/setup.log") (setup.log)"
	grep -A14 'zinc .* configuration' "$OUT/setup.log" | sed 's/^-- //' | tail -15
	[ -n "$dry" ] || configured_cuda "$OUT/setup.log"
	# -k: a test that does not compile costs that test only
	step build 260 build.log cmake --build "$B" -j"$jobs" -- -k
	[ -x "$B/zinc" ] || stop "build failed, no $B/zinc: $(grep -m1 -E 'error' "$OUT/build.log") (build.log)"

	# ---- the checks: every step runs ----------------------------------------------------
	[ -n "$dry" ] || hold_gpu
	step gpu-tests 150 ctest-gpu.log gpu_tests
	[ -z "$hold_pid" ] || kill "$hold_pid" 2> /dev/null
	hold_pid=""
	step sysroot-used 20 setup.log check_sysroot_use
	step zinc-info 20 setup.log "$B/zinc" info
	step train-stage0 60 train.log train --zero-stage 0
	step train-stage3-offload 90 train.log train --zero-stage 3 --offload-optimizer cpu \
		--offload-param cpu
	[ -n "$dry" ] || step train-host-stage0 30 train.log train --host --zero-stage 0
	step bench-adam 45 bench.log "$B/zinc" bench adam --params 64M
	mkdir -p /tmp/zb
	step bench-nvme 60 bench.log "$B/zinc" bench nvme --path /tmp/zb --size 1G
	rm -rf /tmp/zb
	# shellcheck disable=SC2086 # ZN_GPU_CHECK_CTEST is a list of ctest arguments
	step ctest-all 400 ctest-all.log ctest --test-dir "$B" --output-on-failure -j"$jobs" \
		--timeout 300 -LE gpu ${ZN_GPU_CHECK_CTEST:-}

	{
		echo "zinc gpu-check: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null) dry=${dry:-0}, $(($(date +%s) - t0)) s of $budget_s"
		printf '%s\n' "${summary[@]}"
		echo "--- configuration"
		grep -A13 'zinc .* configuration' "$OUT/setup.log" | sed 's/^-- //' | tail -12
		echo "--- tests"
		grep -h '^gpu-tests: \|Synthesis' "$OUT/ctest-gpu.log" 2> /dev/null
		grep -h 'gpu-hold:' "$OUT/ctest-gpu.log" 2> /dev/null
		grep -hE 'tests passed|tests failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Not Run|\*\*\*Skipped' \
			"$OUT"/ctest-all.log 2>/dev/null
		echo "--- training (first and last step line of each run)"
		awk '/^===== train-.*limit/ { if (last != "") print last; print $2; first = 1; last = "" }
		     /^step / { if (first) print; first = 0; last = $0 }
		     END { if (last != "") print last }' "$OUT/train.log" 2>/dev/null
		grep -iE 'error|refus' "$OUT/train.log" 2>/dev/null | head -5
		echo "--- bench"
		grep -E '^ +[0-9]|^# (engine|best|arena|machine)|fall' "$OUT/bench.log" 2>/dev/null | cut -c1-150 | head -24
		figures
	} > "$OUT/summary.txt"
	trim_logs
	cat "$OUT/summary.txt"
}

# sourced (tests): functions only
[ "${BASH_SOURCE[0]}" != "$0" ] || main "$@"
