#!/usr/bin/env bash
# LoRA on a mixture of experts with the frozen base on NVMe (docs/model.md, "Mixture of
# experts"): Qwen3-30B-A3B's shapes (hidden 2048, 32 heads (4 kv), head_dim 128, 128
# experts of 768, 8 per token, vocab 151936) with LAYERS of its 48 layers, a bf16 base
# streamed layer by layer from an O_DIRECT file under NVME_DIR (default /var/tmp): each
# layer without its experts, then only the experts some token routes to, one read each
# (docs/lora.md, "Experts fetched per routed expert"), rank-8 adapters on the attention,
# ZeRO-3, AdamW on the CPU. Prints the step lines (with `| experts X (k of n)`) and the
# summary (peak RSS, the NVMe bytes per step against the plan of the layers' rest, the
# experts' bytes against every expert's), and removes its swap file.
# usage: [NVME_DIR=DIR] bench/moe_lora_nvme.sh [zinc-binary] [layers] [steps] [seq]
set -euo pipefail
cd "$(dirname "$0")/.."
zinc=${1:-build/zinc}
layers=${2:-4}
steps=${3:-3}
seq=${4:-32}
dir=${NVME_DIR:-/var/tmp}
args=(--device host --device-mem 6G --model qwen3-30b-a3b --layers "$layers" --seq "$seq"
	--dtype bf16 --micro-batch 1 --data data/demo.txt --steps "$steps" --steps-per-print 1
	--lora-r 8 --lora-alpha 16 --lora-targets q_proj,k_proj,v_proj,o_proj --zero-stage 3
	--offload-optimizer cpu --offload-param nvme --nvme-path "$dir")
echo "# zinc LoRA on qwen3-30b-a3b x $layers layers, base on nvme: $("$zinc" --version), $(nproc) cores, $(date -u +%F)"
echo "# zinc train ${args[*]}"
"$zinc" train "${args[@]}" 2>&1 | grep -E '^model|^memory|^step|^summary|error'
