#!/usr/bin/env bash
# Model FLOP utilization of zinc train on a lent GPU (issues 17 and 26; formula in
# docs/kernels.md, "Model FLOP utilization"):
#
#   MFU = tok/s x (6 N + 12 L d_attn T) / peak
#
# N = parameters that take part in a GEMM (every weight and bias; GPT-2's tied wte once, as
# the lm_head; Llama's lm_head, not its embedding lookup; not the position table), L layers,
# d_attn = heads x head_dim, T sequence; peak = the dense bf16 tensor-core peak (H200 SXM:
# 989 TFLOP/s; ZN_MFU_PEAK_TFLOPS).
#
#   bash scripts/device/mfu.sh [RUN]...      (no RUN: every run, in this order)
#
# Runs, each ZN_MFU_STEPS steps (default 12; tok/s is the mean of the steps after the first
# 2, from the step lines: --steps-per-print 1), bf16 parameters and compute unless said
# otherwise:
#   llama-1b          TinyLlama-1.1B's shape, stage 0, seq 2048, micro-batch 4
#   gpt2-xl           GPT-2 XL, stage 0, seq 1024, micro-batch ZN_MFU_MB (default 8)
#   llama-8b-2l       Llama-3-8B's shape with 2 layers, stage 0, seq 2048, micro-batch 4
#   gpt2-xl-offload   gpt2-xl at stage 3, optimizer and parameters offloaded to cpu
#   gpt2-xl-fp32      gpt2-xl with --compute-dtype fp32, for the bf16 gain
# scripts/device/gpu-check.sh runs each as a step of its one time budget, in the order it
# documents (docs/gpu-check.md), and puts each run's line into its summary at once; alone,
# e.g. `bash scripts/device/mfu.sh llama-8b-2l | tee mfu.log` after gpu-check.sh.
# ZN_MFU_DRY=1 (gpu-check's dry run) runs each on the host device at the shape of llama-tiny
# or tiny (seq 64, micro-batch 1, 4 steps): the plumbing, not a figure.
#
# Uses the zinc that gpu-check.sh built ($ZN_BUILD, default build-gpu) and its sysroot
# ($ZN_SYSROOT). Prints each run's output, then its line "mfu: NAME N ... MFU x % ..."
# (gpu-check.sh keeps both in $OUT/mfu.log); the training text is $ZN_BUILD/mfu-data.txt.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
S=${ZN_SYSROOT:-/tmp/zsys}
B=${ZN_BUILD:-build-gpu}
steps=${ZN_MFU_STEPS:-12}
mb=${ZN_MFU_MB:-8}
peak=${ZN_MFU_PEAK_TFLOPS:-989}
dry=${ZN_MFU_DRY:-}
ma=x86_64-linux-gnu
export PATH=/usr/local/cuda/bin:$PATH:$S/usr/bin
export LD_LIBRARY_PATH=$S/usr/lib/$ma:$S/usr/lib/$ma/openblas-pthread:$S/lib/$ma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ ! -x "$B/zinc" ]; then
	echo "mfu: no $B/zinc: run scripts/device/gpu-check.sh first (it builds zinc)"
	exit 1
fi
data=$B/mfu-data.txt
# UTF-8 text read as bytes (--data-format text): tokens < 256, valid for any vocab
[ -s "$data" ] || for _ in $(seq 1 40); do cat README.md docs/*.md; done > "$data"

# gpt2_params L C V: weights and biases of every block, ln_f, wte once (no wpe)
gpt2_params() {
	awk -v L="$1" -v C="$2" -v V="$3" 'BEGIN { printf "%.0f", L * (12 * C * C + 13 * C) + 2 * C + V * C }'
}

# llama_params L HIDDEN INTER HEADS KV HEAD_DIM VOCAB: q, k, v, o, gate, up, down and two
# norms per layer, the final norm and the lm_head (the embedding is a lookup)
llama_params() {
	awk -v L="$1" -v H="$2" -v I="$3" -v nh="$4" -v kv="$5" -v hd="$6" -v V="$7" \
	    'BEGIN { printf "%.0f", L * (2 * H * nh * hd + 2 * H * kv * hd + 3 * H * I + 2 * H) + H + V * H }'
}

# mean tok/s of the step lines after the first 2 ("| 12.3k tok/s |")
mean_tps() {
	awk -F'|' '/^step / { n++; if (n <= 2) next; v = $3; gsub(/ tok\/s| /, "", v); m = 1;
	           if (v ~ /k$/) { m = 1e3; sub(/k$/, "", v) } else if (v ~ /M$/) { m = 1e6; sub(/M$/, "", v) }
	           s += v * m; c++ } END { if (c) printf "%.0f", s / c; else print 0 }' "$1"
}

# train NAME N L DATTN T ARGS...: one training run and its MFU line; fails when the run
# failed or gave no step line past the warm-up. --foreground keeps timeout in the caller's
# process group, so gpu-check.sh's step timeout ends zinc too.
train() {
	local name=$1 n=$2 l=$3 da=$4 t=$5 f tps dev=cuda rc
	shift 5
	[ -z "$dry" ] || dev=host
	f=$(mktemp)
	echo "===== $name: zinc train --device $dev $*"
	timeout --foreground "${ZN_MFU_TIMEOUT_S:-240}" "$B/zinc" train --device $dev \
		--data "$data" --data-format text --steps "$steps" --steps-per-print 1 "$@" 2>&1 |
		tee "$f"
	rc=${PIPESTATUS[0]}
	tps=$(mean_tps "$f")
	awk -v name="$name" -v tps="$tps" -v n="$n" -v l="$l" -v da="$da" -v t="$t" -v pk="$peak" \
	    -v peakline="$(grep -o 'dev peak [0-9.]* [KMG]iB' "$f" | tail -1)" -v rc="$rc" \
	    -v note="${dry:+  (dry run: host device, tiny shape)}" \
	    'BEGIN { fl = 6 * n + 12 * l * da * t; mfu = tps * fl / (pk * 1e12);
	             printf "mfu: %-18s N %.3g  flops/token %.3g  %s tok/s  MFU %.1f %% of %g TFLOP/s  %s%s%s\n",
	                    name, n, fl, tps, 100 * mfu, pk, peakline, rc ? "  FAILED rc " rc : "", note }'
	rm -f "$f"
	[ "$rc" -eq 0 ] && [ "$tps" != 0 ]
}

# one_run NAME: the run's shape (the dry run's tiny one under ZN_MFU_DRY) and its MFU line
one_run() {
	local xl=(--model gpt2-xl --seq 1024 --micro-batch "$mb" --dtype bf16) n
	local l1=(--model tinyllama-1.1b --seq 2048 --micro-batch 4 --dtype bf16)
	local l8=(--model llama-3-8b --layers 2 --seq 2048 --micro-batch 4 --dtype bf16)
	if [ -n "$dry" ]; then
		steps=4
		xl=(--model tiny --seq 64 --micro-batch 1 --dtype bf16)
		l1=(--model llama-tiny --seq 64 --micro-batch 1 --dtype bf16)
		l8=("${l1[@]}")
	fi
	case "$1" in
	llama-1b | llama-8b-2l)
		if [ -n "$dry" ]; then
			n=$(llama_params 2 64 128 4 2 16 256)
			train "$1" "$n" 2 64 64 "${l1[@]}" --zero-stage 0
		elif [ "$1" = llama-1b ]; then
			n=$(llama_params 22 2048 5632 32 4 64 32000)
			train "$1" "$n" 22 2048 2048 "${l1[@]}" --zero-stage 0
		else
			n=$(llama_params 2 4096 14336 32 8 128 128256)
			train "$1" "$n" 2 4096 2048 "${l8[@]}" --zero-stage 0
		fi
		;;
	gpt2-xl | gpt2-xl-offload | gpt2-xl-fp32)
		local L=48 C=1600 T=1024 extra=(--zero-stage 0)
		[ -z "$dry" ] || { L=2; C=64; T=64; }
		[ "$1" != gpt2-xl-offload ] ||
			extra=(--zero-stage 3 --offload-optimizer cpu --offload-param cpu)
		[ "$1" != gpt2-xl-fp32 ] || extra+=(--compute-dtype fp32)
		n=$(gpt2_params "$L" "$C" 50257)
		[ -z "$dry" ] || n=$(gpt2_params "$L" "$C" 256)
		train "$1" "$n" "$L" "$C" "$T" "${xl[@]}" "${extra[@]}"
		;;
	*)
		echo "mfu: no run '$1': use llama-1b, gpt2-xl, llama-8b-2l, gpt2-xl-offload or gpt2-xl-fp32" >&2
		return 2
		;;
	esac
}

runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(llama-1b gpt2-xl llama-8b-2l gpt2-xl-offload gpt2-xl-fp32)
rc=0
for r in "${runs[@]}"; do
	one_run "$r" || rc=1
done
exit $rc
