#!/usr/bin/env bash
# QLoRA with the frozen base on NVMe (docs/qlora.md): the NVMe bytes a LoRA step reads with
# the base in bf16, in NF4 (--quantize-base nf4) and in NF4 with double quant, on a Llama
# shape of 8 layers of width 256 (intermediate 688, 4 heads, vocab 256: the decoder
# linears are almost the whole base), rank-8 adapters on all seven linears, ZeRO-3 with the
# optimizer on the CPU and the base (and the adapters) in O_DIRECT files under NVME_DIR.
# Prints, per run, the planned and measured NVMe read bytes per step (the summary line's),
# the ratio to the bf16 base's and the losses.
# usage: [NVME_DIR=DIR] bench/qlora_nvme.sh [zinc-binary] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
zinc=${1:-build/zinc}
steps=${2:-3}
dir=${NVME_DIR:-/var/tmp}
model=(--model llama-tiny --layers 8 --heads 4 --kv-heads 4 --d-model 256 --intermediate 688
	--seq 64 --vocab 256 --dtype bf16)
lora=(--lora-r 8 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
common=(--device host --data data/demo.txt --steps "$steps" --steps-per-print 1
	--zero-stage 3 --offload-optimizer cpu --offload-param nvme --nvme-path "$dir")

echo "# zinc QLoRA, base on nvme: $("$zinc" --version), $(nproc) cores, $(date -u +%F)"
echo "# model: ${model[*]}; ${lora[*]}; ${common[*]}"
echo "# read/step = the summary's planned steady NVMe read bytes per step (base layers"
echo "# 1..n-1 twice per micro-batch, the adapters' fetches); ratio = read/step / bf16's"
printf "%-28s %14s %14s %7s  %s\n" "base" "read/step(B)" "measured(B)" "ratio" "losses"
base_read=
for q in "" "--quantize-base nf4" "--quantize-base nf4 --double-quant"; do
	read -r -a qa <<< "$q"
	out=$("$zinc" train "${model[@]}" "${lora[@]}" "${common[@]}" "${qa[@]}" 2>&1)
	plan=$(sed -n 's/.*nvme per step read [0-9]* B (plan \([0-9]*\).*/\1/p' <<< "$out")
	meas=$(sed -n 's/.*nvme per step read \([0-9]*\) B (plan.*/\1/p' <<< "$out")
	losses=$(sed -n 's/^step [0-9]*\/[0-9]* | loss \([0-9.]*\).*/\1/p' <<< "$out" | tr '\n' ' ')
	base_read=${base_read:-$plan}
	ratio=$(awk -v a="$plan" -v b="$base_read" 'BEGIN { printf "%.3f", a / b }')
	printf "%-28s %14s %14s %7s  %s\n" "${q:-bf16}" "$plan" "$meas" "$ratio" "$losses"
done
