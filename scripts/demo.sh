#!/usr/bin/env bash
# The main job: installs, builds, shows the machine and the plan for a 70B model, then
# trains a GPT with ZeRO stage 3 and CPU offload on the text shipped in data/ (under a
# temp dir unless ZINC_DEMO_DIR is set).
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
