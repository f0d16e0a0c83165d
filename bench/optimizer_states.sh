#!/usr/bin/env bash
# Compact optimizer state: fp32, bf16 and int8 m and v (--optimizer-states) on a
# 19M-parameter GPT trained on data/demo.txt with the optimizer on NVMe (ZeRO-3), one run of
# STEPS steps each: the loss of every step, the NVMe bytes per step (the run's summary:
# measured, and the plan's), the median step time (steps 6..STEPS); then zinc bench step at
# the caps for each setting (step time and bytes per step against NVMe bandwidth).
# Writes OUT/loss.csv, OUT/summary.txt, OUT/bench-step-<states>.txt and, with gnuplot,
# OUT/loss.png. The swap files go under NVME_DIR (default /var/tmp) and are removed.
# The recipe (RECIPE, default: GPT-2's usual one, a linear warmup of 30 steps to lr 1e-3, a
# linear decay to 0 at STEPS, global-norm clipping 1.0, weight decay 0.1) applies to the
# training runs; RECIPE="" trains at zinc's defaults (constant lr 1e-3, no clipping).
# usage: [NVME_DIR=DIR] [STEPS=300] [CAPS=250M,500M,1G,2G,max] [RECIPE="flags"] \
#        bench/optimizer_states.sh [zinc-binary] [out-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
zinc=${1:-build/zinc}
out=${2:-/var/tmp/zn-optstates-out}
steps=${STEPS:-300}
caps=${CAPS:-250M,500M,1G,2G,max}
recipe=${RECIPE-"--lr-schedule WarmupDecayLR --warmup-type linear --warmup-min-lr 0
	--warmup-max-lr 1e-3 --warmup-steps 30 --total-steps $steps --grad-clip 1.0
	--weight-decay 0.1"}
read -r -a recipe <<< "$(echo $recipe)"
nvme=$(mktemp -d "${NVME_DIR:-/var/tmp}/zn-optstates-XXXXXX")
trap 'rm -rf "$nvme"' EXIT
mkdir -p "$out"
model=(--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 64)
common=(--device host --device-mem 2G --micro-batch 4 --deterministic --zero-stage 3
	--offload-optimizer nvme --nvme-path "$nvme")

med() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

{
	echo "# zinc optimizer states: $("$zinc" --version), $(nproc) cores," \
		"$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(date -u '+%F %H:%M UTC')," \
		"load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# model: ${model[*]}; ${common[*]} ${recipe[*]} --data data/demo.txt --steps $steps"
	echo "# final = loss of step N; last10 = mean loss of steps N-9..N; nvme_B = read + write"
	echo "# bytes per step (the run's summary; the plan's in brackets); step_ms = median of"
	echo "# steps 6..$steps; ratios against fp32"
} > "$out/summary.txt"
for s in fp32 bf16 int8; do
	"$zinc" train "${model[@]}" "${common[@]}" ${recipe[@]+"${recipe[@]}"} \
		--data data/demo.txt --steps "$steps" --steps-per-print 1 --optimizer-states "$s" \
		> "$out/train-$s.txt" 2>&1
	grep -o '^step [0-9]*/[0-9]* | loss [0-9.]*' "$out/train-$s.txt" |
		awk '{split($2, a, "/"); print a[1], $5}' > "$out/loss-$s.txt"
done
paste -d' ' "$out/loss-fp32.txt" "$out/loss-bf16.txt" "$out/loss-int8.txt" |
	awk 'BEGIN {print "step,fp32,bf16,int8"} {print $1 "," $2 "," $4 "," $6}' > "$out/loss.csv"
at=$((steps < 150 ? steps : 150))
row() { # states: final@150, last10@150, final@N, last10@N, nvme bytes, plan, step ms
	local f=$out/loss-$1.txt t=$out/train-$1.txt
	awk -v n="$at" '$1 == n {print $2}' "$f"
	awk -v n="$at" '$1 > n - 10 && $1 <= n {s += $2; k++} END {print s / k}' "$f"
	awk -v n="$steps" '$1 == n {print $2}' "$f"
	awk -v n="$steps" '$1 > n - 10 && $1 <= n {s += $2; k++} END {print s / k}' "$f"
	sed -n 's/.*nvme per step read \([0-9]*\) B (plan \([0-9]*\)), write \([0-9]*\) B (plan \([0-9]*\)).*/\1 \3 \2 \4/p' "$t" |
		awk '{print $1 + $2; print $3 + $4}'
	grep -o '| [0-9.]* [m]*s (' "$t" | awk '{v = $2; if ($3 == "s") v *= 1000; print v}' |
		tail -n +6 | med
}
mapfile -t ref < <(row fp32)
printf "%-6s %10s %10s %10s %10s %14s %14s %9s %9s %9s %9s\n" states final150 last10_150 \
	"final$steps" "last10_$steps" nvme_B plan_B step_ms loss150 nvme step >> "$out/summary.txt"
for s in fp32 bf16 int8; do
	mapfile -t r < <(row "$s")
	printf "%-6s %10.4f %10.4f %10.4f %10.4f %14d %14d %9.1f %9.4f %9.3f %9.3f\n" "$s" \
		"${r[0]}" "${r[1]}" "${r[2]}" "${r[3]}" "${r[4]}" "${r[5]}" "${r[6]}" \
		"$(awk -v a="${r[0]}" -v b="${ref[0]}" 'BEGIN {print a / b}')" \
		"$(awk -v a="${r[4]}" -v b="${ref[4]}" 'BEGIN {print a / b}')" \
		"$(awk -v a="${r[6]}" -v b="${ref[6]}" 'BEGIN {print a / b}')" >> "$out/summary.txt"
done
cat "$out/summary.txt"
title=${recipe[*]:+warmup 30, linear decay, clip 1.0, wd 0.1}
title=${title:-constant lr 1e-3, no clipping}
if command -v gnuplot > /dev/null; then
	gnuplot <<-EOF
		set terminal pngcairo size 900,500
		set output "$out/loss.png"
		set datafile separator ","
		set title "19M GPT on data/demo.txt, optimizer on NVMe: loss per step ($title)"
		set xlabel "step"; set ylabel "training loss"; set key top right; set grid
		plot "$out/loss.csv" every ::1 using 1:2 with lines title "fp32 m, v", \
		     "" every ::1 using 1:3 with lines title "bf16 m, v", \
		     "" every ::1 using 1:4 with lines title "int8 m, v (blockwise)"
	EOF
fi
for s in fp32 bf16 int8; do
	"$zinc" bench step "${model[@]}" "${common[@]}" --optimizer-states "$s" --bw "$caps" \
		--warmup 2 --steps 5 > "$out/bench-step-$s.txt" 2>&1
	echo "# --optimizer-states $s"
	grep -v '^zinc: ' "$out/bench-step-$s.txt"
done
