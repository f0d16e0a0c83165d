#!/usr/bin/env bash
# Activation checkpointing (docs/activations.md): device peak and step time of a GPT-2 XL
# shaped model (width 1600, 25 heads, vocab 50257, seq 1024, micro-batch 1) at ZeRO stage 3
# with optimizer and parameters on NVMe, without checkpointing and with the checkpoints on
# the device, in pinned host memory and on NVMe (every layer's input kept). The same model,
# data and seed in each run; rounds alternate the four. LAYERS sets the block count (48 is
# GPT-2 XL; fewer keep a step within minutes on a small CPU host).
# STATES=device keeps the model states on the device instead (ZeRO stage 0, no offload:
# a step without NVMe traffic, so the recompute's compute cost shows; needs fewer LAYERS to
# fit). MODES picks some of the four (a 48-block step takes minutes on a small host: run one mode per
# call). With steps = 2 the figures are step 2's (step 1 warms up).
# usage: [LAYERS=4] [STATES=nvme|device] [MODES="none device cpu nvme"] [NVME_DIR=/var/tmp] [LOG_DIR=dir]
#        bench/activations.sh [zinc] [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
zinc=${1:-build/zinc}
rounds=${2:-1}
steps=${3:-3}
layers=${LAYERS:-4}
nvme_dir=${NVME_DIR:-/var/tmp}
logs=${LOG_DIR:-}   # when set, each run's output is kept there as <round>-<mode>.log
model=(--model gpt2-xl --layers "$layers" --seq 1024)
common=(--device host --device-mem 64G --micro-batch 1 --data data/demo.txt --steps "$steps"
	--steps-per-print 1 --deterministic)
if [ "${STATES:-nvme}" = nvme ]; then
	common+=(--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$nvme_dir")
else
	common+=(--zero-stage 0 --checkpoint-nvme-path "$nvme_dir")
fi
read -r -a modes <<< "${MODES:-none device cpu nvme}"

# "| 1.2 min (fwd 9.1 s, bwd 50.0 s," -> "72000 9100 50000" (ms), one line per step
step_ms() {
	sed -n 's/.*| \([0-9.]*\) \([a-z]*\) (fwd \([0-9.]*\) \([a-z]*\), bwd \([0-9.]*\) \([a-z]*\),.*/\1 \2 \3 \4 \5 \6/p' |
		awk 'function ms(v, u) { if (u == "h") return v * 3600e3; if (u == "min") return v * 60e3
					  if (u == "s") return v * 1000; if (u == "us") return v / 1000; return v }
		     { print ms($1, $2), ms($3, $4), ms($5, $6) }'
}
# median of column c over steps 2.. (step 1 warms up)
med() { tail -n +2 | awk -v c="$1" '{print $c}' | sort -n |
	awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
peak() { sed -n 's/^summary:.*dev peak \([0-9.]*\) \([KMG]\)iB.*/\1 \2/p' |
	awk '{print $2 == "G" ? $1 * 1024 : $2 == "K" ? $1 / 1024 : $1}'; }

echo "# zinc activations: $("$zinc" --version), $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(date -u +%F)"
echo "# model: ${model[*]}; ${common[*]}"
echo "# modes: none (no checkpointing), --gradient-checkpointing --checkpoint-device device|cpu|nvme"
echo "# step, fwd, bwd = medians over steps 2..$steps (ms); peak = summary dev peak (MiB)"
printf "%6s %8s %10s %10s %10s %10s %9s\n" round mode peak_MiB step_ms fwd_ms bwd_ms step/none
for r in $(seq 1 "$rounds"); do
	base=
	for m in "${modes[@]}"; do
		extra=()
		[ "$m" != none ] && extra=(--gradient-checkpointing --checkpoint-device "$m")
		out=$("$zinc" train "${model[@]}" "${common[@]}" "${extra[@]}" 2>&1) || {
			echo "$m: failed: $(echo "$out" | grep -m1 error)"; continue; }
		[ -n "$logs" ] && echo "$out" > "$logs/${STATES:-nvme}-$layers-$r-$m.log"
		s=$(echo "$out" | step_ms)
		st=$(echo "$s" | med 1); fw=$(echo "$s" | med 2); bw=$(echo "$s" | med 3)
		[ -z "$base" ] && base=$st
		printf "%6d %8s %10.1f %10.0f %10.0f %10.0f %9.3f\n" "$r" "$m" \
			"$(echo "$out" | peak)" "$st" "$fw" "$bw" \
			"$(awk -v a="$st" -v b="$base" 'BEGIN {print a / b}')"
		echo "$out" | grep -m1 "activation checkpointing:" | sed 's/^/#   /' || true
	done
done
