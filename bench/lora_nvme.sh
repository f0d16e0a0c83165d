#!/usr/bin/env bash
# LoRA with the frozen base on NVMe (docs/lora.md): a GPT-2-XL-shaped model (48 layers,
# d_model 1600, 25 heads, vocab 50257; bf16 base 3.1 GB) with --device-mem 1G, the base
# streamed from an O_DIRECT file under NVME_DIR (default /var/tmp) layer by layer, rank-8
# adapters on c_attn, c_proj, c_fc trained with ZeRO-3 and AdamW on the CPU.
# Prints each step's time next to its bound: max(compute = fwd + bwd of the step, NVMe =
# the step's measured read bytes / the read bandwidth zinc bench nvme measures on the same
# directory in the same run), the base in host memory (--offload-param cpu) as a second
# reference, and peak RSS against the base's size.
# usage: [NVME_DIR=DIR] [ZINC_ARGS="--frozen-read-buffers N ..."] bench/lora_nvme.sh
#        [zinc-binary] [steps] [seq]      (ZINC_ARGS: added to both runs)
set -euo pipefail
cd "$(dirname "$0")/.."
zinc=${1:-build/zinc}
steps=${2:-4}
seq=${3:-32}
dir=${NVME_DIR:-/var/tmp}
model=(--model gpt2 --layers 48 --d-model 1600 --heads 25 --vocab 50257 --seq "$seq"
	--dtype bf16)
lora=(--lora-r 8 --lora-alpha 16 --lora-targets c_attn,c_proj,c_fc)
common=(--device host --device-mem 1G --micro-batch 1 --data data/demo.txt --steps "$steps"
	--steps-per-print 1 --zero-stage 3 --offload-optimizer cpu --nvme-path "$dir")
read -r -a extra <<< "${ZINC_ARGS:-}"

echo "# zinc LoRA, base on nvme: $("$zinc" --version), $(nproc) cores, $(date -u +%F)"
echo "# model: ${model[*]}; ${lora[*]}; ${common[*]} ${extra[*]}"
bw=$("$zinc" bench nvme --path "$dir" --op read --size 2G --block 8M --depth 8 --json |
	sed -n "s/.*\"read_gbps\":[[:space:]]*\([0-9.e+-]*\).*/\1/p" | sort -g | tail -1)
echo "# nvme read bandwidth (zinc bench nvme --op read --block 8M --depth 8): $bw GB/s"
run() { # prints the step lines and the summary of one run
	"$zinc" train "${model[@]}" "${lora[@]}" "${common[@]}" "${extra[@]}" "$@" 2>&1 |
		grep -E '^step|^summary|error'
}
echo "## base on nvme (--offload-param nvme)"
nv=$(run --offload-param nvme)
echo "$nv"
echo "## base in host memory (--offload-param cpu): the compute bound"
cpu=$(run --offload-param cpu)
echo "$cpu"
step_ms() { # the step times after the first, in ms, one a line
	grep '^step' | sed -E 's/.*\| ([0-9.]+) (us|ms|s) \(fwd.*/\1 \2/' |
		awk 'NR > 1 { print $2 == "s" ? $1 * 1000 : $2 == "us" ? $1 / 1000 : $1 }'
}
med() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# the steady step's reads: the plan's figure (layer 0 is read at step 1 only, so the
# summary's mean over the steps is above it by layer 0's bytes / steps)
rb=$(echo "$nv" | sed -n -E 's/.*nvme per step read [0-9]+ B \(plan ([0-9]+)[;)].*/\1/p')
t_nv=$(echo "$nv" | step_ms | med)
t_cpu=$(echo "$cpu" | step_ms | med)
echo "## step vs bound (medians of steps 2..$steps)"
awk -v t="$t_nv" -v c="$t_cpu" -v rb="$rb" -v bw="$bw" 'BEGIN {
	io = rb / (bw * 1e9) * 1000; b = c > io ? c : io
	printf "base on nvme %.0f ms; bound max(compute %.0f ms (base in host memory), nvme %.0f ms = %.2f GB read / %.2f GB/s) = %.0f ms; %.2f x bound\n", t, c, io, rb / 1e9, bw, b, t / b
}'
