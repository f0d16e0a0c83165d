#!/usr/bin/env bash
# Model FLOP utilization of zinc train on a lent GPU (issue 17; formula in docs/kernels.md,
# "Model FLOP utilization"):
#
#   MFU = tok/s x (6 N + 12 L d_attn T) / peak
#
# N = parameters that take part in a GEMM (every weight and bias; the tied wte once, as
# the lm_head; not the position table), L layers, d_attn = heads x head_dim, T sequence;
# peak = the dense bf16 tensor-core peak (H200 SXM: 989 TFLOP/s; ZN_MFU_PEAK_TFLOPS).
#
# Runs, in bf16 (--dtype bf16, bf16 compute), each ZN_MFU_STEPS steps (default 12; tok/s
# is the mean of the steps after the first 2, from the step lines):
#   gpt2-xl  stage 0, no offload, seq 1024, micro-batch ZN_MFU_MB (default 8)
#   gpt2-xl  stage 3, optimizer and parameters offloaded to cpu (same batch)
#   fp32 compute of the stage-0 run (--compute-dtype fp32), for the bf16 gain
# A Llama ~1B run (TinyLlama-1.1B's shape, from a generated config.json) runs only when
# `zinc train --help` lists --model-config; otherwise one line says it was skipped.
#
# Uses the zinc that scripts/device/gpu-check.sh built ($ZN_BUILD, default build-gpu) and
# its sysroot ($ZN_SYSROOT): run it after the check in the same call, e.g.
#   run(command="ZN_GPU_CHECK_DRY=0 ZN_GPU_CHECK_CTEST='-R none' bash scripts/device/gpu-check.sh; bash scripts/device/mfu.sh",
#       carry=[".debs"], timeout_s=560)
# Output: $OUT/mfu.txt (one line per run) and $OUT/mfu.log (the runs' output).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/zn-gpu-check-out}
S=${ZN_SYSROOT:-/tmp/zsys}
B=${ZN_BUILD:-build-gpu}
steps=${ZN_MFU_STEPS:-12}
mb=${ZN_MFU_MB:-8}
peak=${ZN_MFU_PEAK_TFLOPS:-989}
mkdir -p "$OUT"
log=$OUT/mfu.log
res=$OUT/mfu.txt
: > "$log"
: > "$res"
ma=x86_64-linux-gnu
export PATH=/usr/local/cuda/bin:$PATH:$S/usr/bin
export LD_LIBRARY_PATH=$S/usr/lib/$ma:$S/usr/lib/$ma/openblas-pthread:$S/lib/$ma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ ! -x "$B/zinc" ]; then
	echo "mfu: no $B/zinc: run scripts/device/gpu-check.sh first (it builds zinc)" | tee -a "$res"
	exit 1
fi
data=$OUT/mfu-data.txt
# UTF-8 text read as bytes (--data-format text): tokens < 256, valid for any vocab
for _ in $(seq 1 40); do cat README.md docs/*.md; done > "$data"

# gpt2_params L C V T: weights and biases of every block, ln_f, wte once (no wpe)
gpt2_params() {
	awk -v L="$1" -v C="$2" -v V="$3" 'BEGIN { printf "%.0f", L * (12 * C * C + 13 * C) + 2 * C + V * C }'
}

# mean tok/s of the step lines after the first 2 ("| 12.3k tok/s |", the fourth field)
mean_tps() {
	awk -F'|' '/^step / { n++; if (n <= 2) next; v = $4; gsub(/ tok\/s| /, "", v); m = 1;
	           if (v ~ /k$/) { m = 1e3; sub(/k$/, "", v) } else if (v ~ /M$/) { m = 1e6; sub(/M$/, "", v) }
	           s += v * m; c++ } END { if (c) printf "%.0f", s / c; else print 0 }' "$1"
}

# run NAME N L DATTN T ARGS...: one training run and its MFU line
run() {
	local name=$1 n=$2 l=$3 da=$4 t=$5 f=$OUT/mfu-$1.log tps
	shift 5
	echo "===== $name: zinc train $*" >> "$log"
	timeout 240 "$B/zinc" train --device cuda --data "$data" --data-format text --steps "$steps" "$@" \
		> "$f" 2>&1
	cat "$f" >> "$log"
	tps=$(mean_tps "$f")
	awk -v name="$name" -v tps="$tps" -v n="$n" -v l="$l" -v da="$da" -v t="$t" -v pk="$peak" \
	    -v peakline="$(grep -m1 -o 'dev peak [0-9.]* [KMG]iB' "$f" | tail -1)" \
	    'BEGIN { fl = 6 * n + 12 * l * da * t; mfu = tps * fl / (pk * 1e12);
	             printf "%-22s N %.3g  flops/token %.3g  %s tok/s  MFU %.1f %%  %s\n", name, n, fl, tps, 100 * mfu, peakline }' |
		tee -a "$res"
}

xl=$(gpt2_params 48 1600 50257 1024)
xl_args=(--model gpt2-xl --seq 1024 --micro-batch "$mb" --dtype bf16)
run gpt2-xl-bf16-stage0 "$xl" 48 1600 1024 "${xl_args[@]}" --zero-stage 0
run gpt2-xl-bf16-offload "$xl" 48 1600 1024 "${xl_args[@]}" --zero-stage 3 \
	--offload-optimizer cpu --offload-param cpu
run gpt2-xl-fp32compute "$xl" 48 1600 1024 "${xl_args[@]}" --zero-stage 0 --compute-dtype fp32

# Llama ~1B (TinyLlama-1.1B's shape) when this zinc's CLI trains Llama from a config.json
if "$B/zinc" train --help 2>&1 | grep -q -- '--model-config'; then
	d=$OUT/llama-1b
	mkdir -p "$d"
	cat > "$d/config.json" << 'EOF'
{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
 "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
 "vocab_size": 32000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}
EOF
	# 22 x (q 2048^2 + k, v 2048 x 256 each + o 2048^2 + 3 x 2048 x 5632 + 2 norms)
	# + final norm + lm_head 32000 x 2048 (the embedding is a lookup)
	n=$(awk 'BEGIN { printf "%.0f", 22 * (2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632 + 2 * 2048) + 2048 + 32000 * 2048 }')
	run llama-1b-bf16-stage0 "$n" 22 2048 2048 --model-config "$d/config.json" --seq 2048 \
		--micro-batch 4 \
		--dtype bf16 --zero-stage 0
else
	echo "llama-1b: skipped: this zinc's train CLI has no --model-config (Llama) yet" | tee -a "$res"
fi
cat "$res"
