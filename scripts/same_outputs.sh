#!/usr/bin/env bash
# Two zinc binaries, the same runs: their loss lines, saved weights and adapters, and
# generated text compared byte for byte. For a refactor that must change nothing (the
# engine's parts, the store): build the old commit in one tree and the new in another.
#
#     scripts/same_outputs.sh OLD/build/zinc NEW/build/zinc [WORK_DIR]   # KEEP=1: keep WORK_DIR
#
# Runs (tiny shapes, host device, a few steps each): GPT-2 at ZeRO-3 with CPU offload;
# ZeRO-3 with optimizer and parameters on NVMe and activation checkpoints on NVMe;
# layer-major accumulation with the optimizer on NVMe; Llama bf16 with parameters on NVMe
# and checkpoints in host memory; LoRA with dropout on a base streamed from NVMe; QLoRA
# (NF4, double quant); Qwen3-MoE LoRA on the experts, base on NVMe, layer-major; generate
# with an adapter, base on NVMe. Exit 1 when anything differs or a run fails.
set -uo pipefail
[ $# -ge 2 ] || { sed -n 2,8p "$0" >&2; exit 2; }
A=$1 B=$2 W=${3:-$(mktemp -d /var/tmp/zinc-same.XXXXXX)}
T=$(cd "$(dirname "$0")/.." && pwd)/data/demo.txt
mkdir -p "$W"/a "$W"/b "$W"/nvme_a "$W"/nvme_b
[ -n "${KEEP:-}" ] || trap 'rm -rf "$W"' EXIT
bad=0
g=(--model small --layers 4 --d-model 64 --heads 4 --seq 32 --vocab 256 --device host
   --device-mem 20M --micro-batch 2 --grad-accum 2 --steps 4 --steps-per-print 1 --seed 3
   --lr 1e-3 --no-pin-memory --data "$T")
l=(--model llama-tiny --layers 4 --d-model 64 --heads 4 --kv-heads 2 --seq 32 --vocab 256
   --intermediate 128 --device host --device-mem 40M --micro-batch 2 --grad-accum 2
   --steps 3 --steps-per-print 1 --seed 5 --lr 1e-3 --no-pin-memory)
m=(--model qwen3-30b-a3b --layers 3 --d-model 64 --heads 4 --kv-heads 2 --head-dim 16
   --seq 32 --vocab 256 --intermediate 32 --device host --device-mem 200M --micro-batch 2
   --grad-accum 2 --steps 2 --steps-per-print 1 --seed 7 --lr 1e-3 --no-pin-memory --data "$T")
z3=(--zero-stage 3 --offload-optimizer cpu)

# run NAME ARGS...: @D@ is the side's output dir, @N@ its nvme dir
run() {
	local name=$1 side bin
	shift
	for side in a b; do
		bin=$A
		[ $side = b ] && bin=$B
		local args=("${@//@D@/$W/$side}")
		args=("${args[@]//@N@/$W/nvme_$side}")
		"$bin" "${args[@]}" > "$W/$side/$name.out" 2>&1 || { echo "$name: $side failed"; tail -n 3 "$W/$side/$name.out"; bad=1; }
	done
	if cmp -s <(grep -aoE "loss[ =:][^|]*" "$W/a/$name.out") <(grep -aoE "loss[ =:][^|]*" "$W/b/$name.out"); then
		echo "$name: loss lines equal ($(grep -ac loss "$W/a/$name.out"))"
	else
		echo "$name: loss lines DIFFER"; bad=1
	fi
}

run gpt2_z3_cpu train "${g[@]}" --zero-stage 3 --offload-optimizer cpu --offload-param cpu \
	--save-final @D@/gpt2_z3_cpu.safetensors
run gpt2_z3_nvme train "${g[@]}" --zero-stage 3 --offload-optimizer nvme --offload-param nvme \
	--nvme-path @N@ --checkpoint-device nvme --checkpoint-every 2 \
	--save-final @D@/gpt2_z3_nvme.safetensors
run gpt2_layer_major train "${g[@]}" --zero-stage 2 --offload-optimizer nvme --nvme-path @N@ \
	--schedule layer-major --save-final @D@/gpt2_layer_major.safetensors
run llama_bf16 train "${l[@]}" --data "$T" --zero-stage 3 --bf16 --offload-optimizer cpu \
	--offload-param nvme --nvme-path @N@ --checkpoint-device cpu \
	--save-final @D@/llama_bf16.safetensors
run llama_lora train "${l[@]}" --data "$T" --lora-r 4 --lora-targets q_proj,v_proj,down_proj \
	--lora-dropout 0.1 "${z3[@]}" --offload-param nvme --nvme-path @N@ --save-adapter @D@/llama_lora
run llama_qlora train "${l[@]}" --data "$T" --lora-r 4 --lora-targets q_proj,v_proj \
	--quantize-base nf4 --double-quant "${z3[@]}" --offload-param cpu --save-adapter @D@/llama_qlora
run moe_lora train "${m[@]}" --lora-r 4 --lora-targets q_proj,gate_proj,up_proj,down_proj \
	"${z3[@]}" --offload-param nvme --nvme-path @N@ --schedule layer-major --save-adapter @D@/moe_lora
run llama_base train "${l[@]}" --data "$T" --steps 2 --save-final @D@/llama_base
run generate generate --init-from @D@/llama_base --tokenizer bytes --prompt "When in the" \
	--max-new-tokens 12 --seed 1 --temperature 0.8 --top-k 20 --device host --device-mem 40M \
	--offload-param nvme --nvme-path @N@ --adapter @D@/llama_lora
# the text: the first line that is not a log line ("zinc: ...", e.g. a swap store reserved)
if cmp -s <(grep -av "^zinc: " "$W/a/generate.out" | head -n 1) <(grep -av "^zinc: " "$W/b/generate.out" | head -n 1); then
	echo "generate: text equal"
else
	echo "generate: text DIFFERS"; bad=1
fi
for f in $(cd "$W/a" && find . -name '*.safetensors' -o -name adapter_config.json | sort); do
	if cmp -s "$W/a/$f" "$W/b/$f"; then echo "  $f identical"; else echo "  $f DIFFERS"; bad=1; fi
done
exit $bad
