#!/usr/bin/env bash
# Offload overhead: median step time of ZeRO stage 3 with optimizer and parameters offloaded
# to host memory (cpu) and to NVMe swap files (nvme, under NVME_DIR, default /var/tmp),
# against the no-offload stage-0 run of the same model, batch and data, in one run
# (alternating, several rounds). ratio = offload median / baseline median.
# usage: [NVME_DIR=DIR] bench/offload_overhead.sh [zinc-binary] [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
zinc=${1:-build/zinc}
rounds=${2:-3}
steps=${3:-30}
model=(--model small --layers 6 --d-model 192 --heads 6 --seq 64 --vocab 256)
common=(--device host --device-mem 1G --micro-batch 2 --grad-accum 2 --data data/demo.txt
	--steps "$steps" --steps-per-print 1 --deterministic)

nvme_dir=${NVME_DIR:-/var/tmp}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print a / b}'; }
med() { printf "%s\n" "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

median_step_ms() { # skips the first 5 steps (warm-up), prints the median step time in ms
	grep -o '| [0-9.]* ms (' | awk '{print $2}' | tail -n +6 | sort -n |
		awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'
}

echo "# zinc offload overhead: $("$zinc" --version), $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(date -u +%F)"
echo "# model: ${model[*]}; ${common[*]}"
echo "# baseline: --zero-stage 0 (everything on the device); offload: --zero-stage 3"
echo "#   --offload-optimizer X --offload-param X, X = cpu, nvme (--nvme-path $nvme_dir)"
echo "# step = median over steps 6..$steps; ratio = offload / baseline"
printf "%6s %12s %12s %10s %12s %10s\n" round baseline_ms cpu_ms cpu_ratio nvme_ms nvme_ratio
base_all=(); off_all=(); nv_all=()
for r in $(seq 1 "$rounds"); do
	b=$("$zinc" train "${model[@]}" "${common[@]}" --zero-stage 0 2>&1 | median_step_ms)
	o=$("$zinc" train "${model[@]}" "${common[@]}" --zero-stage 3 --offload-optimizer cpu \
		--offload-param cpu 2>&1 | median_step_ms)
	v=$("$zinc" train "${model[@]}" "${common[@]}" --zero-stage 3 --offload-optimizer nvme \
		--offload-param nvme --nvme-path "$nvme_dir" 2>&1 | median_step_ms)
	base_all+=("$b"); off_all+=("$o"); nv_all+=("$v")
	printf "%6d %12.1f %12.1f %10.3f %12.1f %10.3f\n" "$r" "$b" "$o" "$(ratio "$o" "$b")" \
		"$v" "$(ratio "$v" "$b")"
done
mb=$(med "${base_all[@]}"); mo=$(med "${off_all[@]}"); mv=$(med "${nv_all[@]}")
printf "%6s %12.1f %12.1f %10.3f %12.1f %10.3f\n" median "$mb" "$mo" "$(ratio "$mo" "$mb")" \
	"$mv" "$(ratio "$mv" "$mb")"
