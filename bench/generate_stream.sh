#!/usr/bin/env bash
# zinc generate with the layers streamed (docs/generate.md): a GPT-2-medium-shaped model
# (24 layers, d_model 1024, vocab 50257; 355 M parameters, 1.42 GB fp32), made once with one
# step of zinc train, generated from with --device host --device-mem 600M (below the model),
# its layers 1 .. 24 in host memory (--offload-param cpu) and in a file under NVME_DIR
# (--offload-param nvme). Prints each run's figures (prefill, decode tok/s, bytes streamed)
# and its peak RSS, for each zinc binary given (e.g. one before a change and one after).
# The nvme read bandwidth of NVME_DIR (zinc bench nvme, with the last binary) bounds the
# nvme decode at bandwidth / (bytes read per token = the streamed layers' extents).
# usage: [NVME_DIR=DIR] [NEW=N] bench/generate_stream.sh MODEL.safetensors zinc [zinc ...]
set -euo pipefail
model=$1
shift
dir=${NVME_DIR:-/var/tmp}
new=${NEW:-24}
if [ ! -f "$model" ]; then
	head -c 20000 "$(dirname "$0")/../README.md" > "$model.txt"
	"$1" train --model gpt2-medium --seq 64 --micro-batch 1 --steps 1 --data "$model.txt" \
		--device-mem 8G --save-final "$model" > /dev/null
	rm -f "$model.txt"
fi
echo "# zinc generate, layers streamed: $(nproc) cores, $(date -u '+%F %H:%M UTC'), $(uptime)"
bw=$("${@: -1}" bench nvme --path "$dir" --op read --size 1G --block 1M --depth 32 --json |
	sed -n "s/.*\"read_gbps\":[[:space:]]*\([0-9.e+-]*\).*/\1/p" | sort -g | tail -1)
echo "# nvme read bandwidth of $dir (zinc bench nvme --op read --block 1M --depth 32): $bw GB/s"
for zinc in "$@"; do
	for home in cpu nvme; do
		extra=()
		[ "$home" = nvme ] && extra=(--nvme-path "$dir")
		echo "## $zinc --offload-param $home"
		/usr/bin/time -f "peak RSS %M KiB, wall %e s" "$zinc" generate --init-from "$model" \
			--tokenizer bytes --prompt "hello world" --max-new-tokens "$new" \
			--ignore-eos --device host --device-mem 600M --offload-param "$home" \
			"${extra[@]}" 2>&1 >/dev/null | grep -E 'prefill|device|peak|error'
	done
done
echo "# load at the end: $(uptime)"
