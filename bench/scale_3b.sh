#!/usr/bin/env bash
# Scale benchmark: a GPT-2-shaped model of about 3 B parameters (gpt2-xl widened to
# 96 layers: 48 GB of model states at 16 bytes per parameter, twice this VM's RAM) trained
# for 3 steps at ZeRO stage 3 with optimizer and parameters on NVMe, on the host device.
#
#   bench/scale_3b.sh [zinc-binary] [DIR]     (defaults: build/zinc, /var/tmp/zinc-scale-3b)
#   env: LAYERS=96 STEPS=3 DEVICE_MEM=3G SEQ=128 BENCH_SIZE=4G LOG=FILE
#
# Prints, beside the run's own summary line:
#   - peak RSS from the kernel (wait4's ru_maxrss through /usr/bin/time) against the plan's
#     device + pinned bytes + 512 MiB and against a quarter of the model states;
#   - the mean step time against the NVMe-bound time: the measured NVMe bytes per step
#     divided by the read and write bandwidth `zinc bench nvme` measures on DIR in this run.
# It checks the free space on DIR first (14 B per parameter + 6 GiB) and removes every
# file it made on exit. Not part of the test suite (it runs for a long time).
set -euo pipefail
cd "$(dirname "$0")/.."
zinc=${1:-build/zinc}
dir=${2:-/var/tmp/zinc-scale-3b}
layers=${LAYERS:-96}
steps=${STEPS:-3}
devmem=${DEVICE_MEM:-3G}
seq=${SEQ:-128}

[ -x "$zinc" ] || { echo "scale_3b.sh: $zinc is not built" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "scale_3b.sh: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT

model=(--model gpt2-xl --layers "$layers" --seq "$seq")
run=(--device host --device-mem "$devmem" --micro-batch 1 --steps "$steps" --steps-per-print 1
	--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$dir"
	--data data/demo.txt)

echo "# zinc scale benchmark: $("$zinc" --version), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(date -u '+%F %H:%M UTC')"
echo "# model: ${model[*]}; ${run[*]}"
est=$("$zinc" estimate "${model[@]}" \
	--json 2>/dev/null || true)
avail=$(df -B1 --output=avail "$dir" | tail -1)
params=$(printf '%s' "$est" | sed -n 's/.*"params":[[:space:]]*\([0-9.e+]*\).*/\1/p' | head -1)
need=$(awk -v p="${params:-3.1e9}" 'BEGIN {printf "%.0f", p * 14 + 6 * 2^30}')
echo "# free on $dir: $avail bytes; need about $need (at most 14 B per parameter on nvme + 6 GiB for the bandwidth file and the margin)"
if [ "$avail" -lt "$need" ]; then
	echo "scale_3b.sh: not enough free space on $dir" >&2
	exit 1
fi

bwsize=${BENCH_SIZE:-4G}
bw=$("$zinc" bench nvme --path "$dir" --size "$bwsize" --iters 1 --json)
rd_gbps=$(printf '%s' "$bw" | tr ',' '\n' | sed -n 's/.*"read_gbps":[[:space:]]*\([0-9.]*\).*/\1/p' | head -1)
wr_gbps=$(printf '%s' "$bw" | tr ',' '\n' | sed -n 's/.*"write_gbps":[[:space:]]*\([0-9.]*\).*/\1/p' | head -1)
echo "# zinc bench nvme --path $dir --size $bwsize --iters 1: read $rd_gbps GB/s, write $wr_gbps GB/s"

log=${LOG:-/var/tmp/zinc-scale-3b-train.log}
/usr/bin/time -v "$zinc" train "${model[@]}" "${run[@]}" > "$log" 2>&1 || {
	tail -30 "$log" >&2
	exit 1
}
grep -E '^(model|zero|memory|step|summary)' "$log" || true
rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$log")
wall=$(sed -n 's/.*Elapsed (wall clock) time.*m:ss): *//p' "$log")
sum=$(grep '^summary:' "$log")
# "mean step 1.1 min" / "54.1 s" / "820 ms" / "1.2 h" -> ms
mean_ms=$(printf '%s' "$sum" | sed -n 's/.*mean step \([0-9.]*\) \([a-z]*\).*/\1 \2/p' |
	awk '{m = 1; if ($2 == "s") m = 1e3; if ($2 == "min") m = 60e3; if ($2 == "h") m = 3600e3
	      print $1 * m}')
rd=$(printf '%s' "$sum" | sed -n 's/.*nvme per step read \([0-9]*\) B.*/\1/p')
wr=$(printf '%s' "$sum" | sed -n 's/.*write \([0-9]*\) B (plan.*/\1/p')
# "memory plan: device X UNIT, pinned Y UNIT + margin ..." -> bytes
to_bytes() { awk '{m = 1; if ($2 ~ /^KiB/) m = 2^10; if ($2 ~ /^MiB/) m = 2^20;
	if ($2 ~ /^GiB/) m = 2^30; if ($2 ~ /^TiB/) m = 2^40; printf "%.0f", $1 * m}'; }
mem=$(grep '^memory plan:' "$log" | head -1)
plan_dev=$(printf '%s' "$mem" | sed -n 's/.*device \([0-9.]* [A-Za-z]*\),.*/\1/p' | to_bytes)
plan_pin=$(printf '%s' "$mem" | sed -n 's/.*pinned \([0-9.]* [A-Za-z]*\) + margin.*/\1/p' | to_bytes)
awk -v rss="$rss_kib" -v dev="${plan_dev:-0}" -v pin="${plan_pin:-0}" -v p="${params:-0}" \
	-v ms="$mean_ms" -v rd="$rd" -v wr="$wr" -v rbw="$rd_gbps" -v wbw="$wr_gbps" \
	-v wall="$wall" 'BEGIN {
	rss *= 1024; bound = dev + pin + 512 * 2^20; states = p * 16
	printf "peak RSS (kernel) %.2f GiB; plan device %.2f GiB + pinned %.2f GiB + 512 MiB = %.2f GiB: %s\n",
		rss / 2^30, dev / 2^30, pin / 2^30, bound / 2^30, (rss <= bound) ? "within" : "OVER"
	printf "model states %.1f GB, a quarter %.1f GB: peak RSS %s\n", states / 1e9,
		states / 4e9, (rss <= states / 4) ? "within" : "OVER"
	nb = (rbw > 0 && wbw > 0) ? rd / (rbw * 1e9) + wr / (wbw * 1e9) : 0
	printf "mean step %.1f s; nvme per step read %.2f GB + write %.2f GB -> nvme-bound %.1f s (%.2fx); wall %s\n",
		ms / 1e3, rd / 1e9, wr / 1e9, nb, (nb > 0) ? ms / 1e3 / nb : 0, wall
}'
