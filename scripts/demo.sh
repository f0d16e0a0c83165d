#!/usr/bin/env bash
# The main job: installs, builds, shows the machine and the plan for a 70B model, then
# trains a GPT with ZeRO stage 3 and CPU offload on the text shipped in data/, then the NVMe
# tier: a short traced run with the state on NVMe, zinc bench step at two caps, and zinc
# generate from the trained model with its layers streamed from NVMe (all under a temp dir
# unless ZINC_DEMO_DIR is set).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
zinc=${BUILD_DIR:-build}/zinc
dir=${ZINC_DEMO_DIR:-$(mktemp -d -t zinc-demo.XXXXXX)}
mkdir -p "$dir"
echo "== zinc info"
"$zinc" info --nvme-path "$dir"
echo "== zinc estimate: 70B parameters on 8 nodes x 8 GPUs"
"$zinc" estimate --params 70B --largest-layer 1B --gpus 8 --nodes 8

# ---- training demo ---------------------------------------------------------------------
# A 6-layer GPT (2.7M parameters, byte-level vocabulary) whose model states at stage 0
# (fp32 parameters, gradients and AdamW moments: 16 bytes a parameter, 42 MiB) do not fit
# the 20 MiB device budget set here. zinc refuses stage 0 before allocating anything,
# then trains at ZeRO stage 3 with the optimizer state and the parameter shards offloaded
# to host memory, on the text shipped in data/: the loss goes down.
text=data/demo.txt # shipped with the repo
model=(--model small --layers 6 --d-model 192 --heads 6 --seq 64 --vocab 256)
budget=(--device host --device-mem 20M --micro-batch 2 --grad-accum 2)
pin=()
# mlock needs RLIMIT_MEMLOCK (root has CAP_IPC_LOCK, which ignores it); without the room,
# run with pageable host memory
lim=$(ulimit -l)
if [ "$(id -u)" -ne 0 ] && [ "$lim" != unlimited ] && [ "$lim" -lt 262144 ]; then
	echo "(memlock limit ${lim} KiB: host buffers stay pageable; raise ulimit -l to pin them)"
	pin=(--no-pin-memory)
fi
echo "== zinc train at stage 0: refused, the model states do not fit the device budget"
if "$zinc" train "${model[@]}" "${budget[@]}" --data "$text" --steps 1; then
	echo "demo: stage 0 should have been refused" >&2
	exit 1
fi
echo "== zinc train at ZeRO stage 3 with CPU offload of optimizer and parameters"
"$zinc" train "${model[@]}" "${budget[@]}" --data "$text" --steps ${ZINC_DEMO_STEPS:-300} \
	--steps-per-print 10 --zero-stage 3 --offload-optimizer cpu --offload-param cpu \
	"${pin[@]}" --lr 2e-3 --lr-schedule WarmupCosineLR --warmup-steps 10 \
	--total-steps ${ZINC_DEMO_STEPS:-300} --warmup-type linear \
	--save-final "$dir/demo-final.safetensors"

# ---- the NVMe tier ------------------------------------------------------------------------
# The same model with the optimizer state and the parameter shards on NVMe (swap files under
# the demo's temp dir), a short run traced; then zinc bench step at two bandwidth caps: step
# time next to the bound the hardware allows (docs/bench-step.md), with its plot.
nvme=(--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$dir")
echo "== zinc train with optimizer and parameters on NVMe ($dir), steps 4-5 traced"
"$zinc" train "${model[@]}" "${budget[@]}" --data "$text" --steps 6 --steps-per-print 1 \
	"${nvme[@]}" "${pin[@]}" --trace "$dir/train-trace.json" --trace-steps 4-5
echo "== zinc bench step at 64M and 256M per direction"
"$zinc" bench step "${model[@]}" "${budget[@]}" "${nvme[@]}" "${pin[@]}" --bw 64M,256M \
	--warmup 1 --steps 3 --plot "$dir/bench-step.png" --csv "$dir/bench-step.csv" \
	--trace "$dir/bench-step-trace.json"
echo "== zinc generate: the trained model continues a line (sampled, seeded, KV cache), its"
echo "   layers streamed from NVMe through training's frozen-parameter prefetch, read ahead"
echo "   with io_uring (docs/generate.md); after 300 steps on 2 cores it has learned letter"
echo "   statistics, not words"
"$zinc" generate --init-from "$dir/demo-final.safetensors" --tokenizer bytes \
	--prompt "When in the Course of human events," --max-new-tokens 28 \
	--temperature 0.8 --top-k 20 --seed 1 \
	--device host --device-mem 20M --offload-param nvme --nvme-path "$dir"
echo
echo "== open the traces in ui.perfetto.dev (docs/trace.md):"
echo "   $dir/train-trace.json"
echo "   $dir/bench-step-trace.json"
echo "== the plot: $dir/bench-step.png (without gnuplot: $dir/bench-step.csv)"
