#!/usr/bin/env bash
# Attention and compute dtype side by side on the host device (bench/RESULTS.md):
# the 2-layer GPT-2 of d_model 256, 8 heads, micro-batch 1, vocab 256 at sequence 256, 512,
# 1024 and 2048, trained STEPS steps (default 3) by
#   old   a zinc built from main before the fused attention (588cd5d: naive attention with
#         [B,NH,T,T] preatt/att/datt/dpreatt, unchunked lm_head + cross-entropy), $OLD_ZINC
#   new   this tree's zinc (fused attention, chunked lm_head + CE), $NEW_ZINC, fp32
#   bf16  the new zinc with --dtype bf16 (bf16 compute)  and  bf16/fp32c: --dtype bf16
#         --compute-dtype fp32 (fp32 working copies)
# and prints per run: tok/s (T over the mean step time, steps after the first) and the device peak
# (the summary line). A second table (LLAMA=0 skips it) runs the new zinc's Llama of the
# same width (--model llama-tiny --layers 2 --d-model 256 --heads 8 --kv-heads 2
# --intermediate 688 --vocab 256: GQA, fused attention, chunked lm_head) in fp32, bf16
# compute, and bf16 parameters with fp32 compute (the old zinc has no Llama). Build the old
# zinc with
#   git worktree add --detach /var/tmp/zinc-old 588cd5d && cmake -S /var/tmp/zinc-old \
#       -B /var/tmp/zinc-old/build -DZINC_CUDA=OFF && cmake --build /var/tmp/zinc-old/build --target zinc
#
#     OLD_ZINC=/var/tmp/zinc-old/build/zinc NEW_ZINC=build/zinc bench/attention_seq.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OLD_ZINC=${OLD_ZINC:-}
NEW_ZINC=${NEW_ZINC:-build/zinc}
STEPS=${STEPS:-3}
SEQS=${SEQS:-"256 512 1024 2048"}
LLAMA=${LLAMA:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data=$tmp/text.txt
cat README.md docs/*.md > "$data"

# one run: prints "tok/s peak"
one() {
	local bin=$1 T=$2 f=$tmp/run.log
	shift 2
	"$bin" train --device host --layers 2 --d-model 256 --heads 8 --seq "$T" --vocab 256 \
		--micro-batch 1 --steps "$STEPS" --data "$data" --data-format text --deterministic \
		"$@" > "$f" 2>&1 ||
		{ echo "failed (see below)"; tail -3 "$f"; return; }
	# tok/s = T / mean step time (micro-batch 1), from the step lines' times (ms or s,
	# three figures) rather than their rounded tok/s
	awk -F'|' -v T="$T" '/^step / { n++; if (n < 2) next; split($4, w, " ");
	           t = w[1] * (w[2] == "ms" ? 1e-3 : 1); s += t; c++ }
	     /^summary:/ { p = $0; sub(/.*dev peak /, "", p) }
	     END { printf "%8.0f tok/s  %10s", c ? T * c / s : 0, p }' "$f"
}

printf '%-6s %-30s %-30s %-30s %-30s\n' seq "old (naive attn)" "new (fused), fp32" \
	"new, bf16 compute" "new, bf16 params fp32 compute"
for T in $SEQS; do
	old="(no OLD_ZINC)"
	[ -z "$OLD_ZINC" ] || old=$(one "$OLD_ZINC" "$T")
	printf '%-6s %-30s %-30s %-30s %-30s\n' "$T" "$old" "$(one "$NEW_ZINC" "$T")" \
		"$(one "$NEW_ZINC" "$T" --dtype bf16)" \
		"$(one "$NEW_ZINC" "$T" --dtype bf16 --compute-dtype fp32)"
done

[ "$LLAMA" = 1 ] || exit 0
echo
printf '%-6s %-30s %-30s %-30s\n' seq "llama fp32" "llama bf16 compute" \
	"llama bf16 params fp32 compute"
for T in $SEQS; do
	set -- --model llama-tiny --kv-heads 2 --intermediate 688
	printf '%-6s %-30s %-30s %-30s\n' "$T" "$(one "$NEW_ZINC" "$T" "$@")" \
		"$(one "$NEW_ZINC" "$T" "$@" --dtype bf16)" \
		"$(one "$NEW_ZINC" "$T" "$@" --dtype bf16 --compute-dtype fp32)"
done
