#!/usr/bin/env bash
# zinc's io_uring engine against fio's best io_uring setting, side by side on one file.
#
#   bench/nvme_vs_fio.sh [DIR]        (default DIR: /var/tmp)
#   env: SIZE=1G BS=1M DEPTH=32 ROUNDS=5 ZINC=build/zinc
#
# Each round runs, for write and then read, fio
#   fio --ioengine=io_uring --direct=1 --fixedbufs --registerfiles --iodepth=$DEPTH --bs=$BS
# and `zinc bench nvme --file F --block $BS --depth $DEPTH --rings 1 --iters 1`, on the same
# file, alternating which goes first (shared disks drift; alternating spreads the drift over
# both). It prints every figure, then the median of each tool and zinc/fio.
#
# GB/s = bytes / seconds / 1e9 for both: fio's bw_bytes (bytes moved / job runtime), zinc's
# write_gbps / read_gbps (bytes / time from submit to completion). zinc checks the data
# outside its timed part; fio does not check. Before a timed zinc read, zinc writes the
# file and reads it back to check it (both untimed); so every timed fio read is preceded by
# the same: an untimed write and an untimed read of the whole file. Both tools then read
# data equally fresh in whatever caches sit below the guest.
set -euo pipefail

DIR=${1:-/var/tmp}
SIZE=${SIZE:-1G}
BS=${BS:-1M}
DEPTH=${DEPTH:-32}
ROUNDS=${ROUNDS:-5}
ZINC=${ZINC:-build/zinc}

command -v fio >/dev/null || { echo "nvme_vs_fio.sh: fio is not installed" >&2; exit 2; }
command -v jq >/dev/null || { echo "nvme_vs_fio.sh: jq is not installed" >&2; exit 2; }
[ -x "$ZINC" ] || { echo "nvme_vs_fio.sh: $ZINC is not built (set ZINC=...)" >&2; exit 2; }

F="$DIR/zinc-vs-fio-$$.bin"
trap 'rm -f "$F"' EXIT

fio_run() { # op -> GB/s
	if [ "$1" = read ]; then layout; warm_read; fi
	fio --name=zinc-vs-fio --filename="$F" --size="$SIZE" --rw="$1" --bs="$BS" \
		--direct=1 --ioengine=io_uring --fixedbufs --registerfiles --iodepth="$DEPTH" \
		--numjobs=1 --thread --output-format=json 2>/dev/null |
		jq -r ".jobs[0].$1.bw_bytes / 1e9"
}

zinc_run() { # op -> GB/s
	"$ZINC" bench nvme --file "$F" --size "$SIZE" --block "$BS" --depth "$DEPTH" --rings 1 \
		--op "$1" --iters 1 --json 2>/dev/null | jq -r ".cases[0].${1}_gbps"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

warm_read() { # an untimed read of the whole file
	fio --name=warm --filename="$F" --size="$SIZE" --rw=read --bs="$BS" --direct=1 \
		--ioengine=io_uring --iodepth="$DEPTH" --output-format=json >/dev/null 2>&1
}

layout() { # an untimed write of the whole file
	fio --name=layout --filename="$F" --size="$SIZE" --rw=write --bs="$BS" --direct=1 \
		--ioengine=io_uring --iodepth="$DEPTH" --output-format=json >/dev/null 2>&1
}

layout

echo "# zinc vs fio: $(uname -r), $(nproc) CPUs, $(df -T "$DIR" | awk 'NR==2 { print $2 }') at $DIR"
echo "# size $SIZE, block $BS, depth $DEPTH, 1 ring / 1 job, $ROUNDS rounds, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# fio: $(fio --version), --ioengine=io_uring --direct=1 --fixedbufs --registerfiles"
echo "# zinc: $("$ZINC" --version)"
printf "#%5s %6s %10s %10s\n" round op "fio_GB/s" "zinc_GB/s"

declare -A FIO ZN
for r in $(seq 1 "$ROUNDS"); do
	for op in write read; do
		if (( r % 2 )); then
			f=$(fio_run "$op"); z=$(zinc_run "$op")
		else
			z=$(zinc_run "$op"); f=$(fio_run "$op")
		fi
		FIO[$op]+="$f "
		ZN[$op]+="$z "
		printf " %5d %6s %10.3f %10.3f\n" "$r" "$op" "$f" "$z"
	done
done

status=0
for op in write read; do
	fm=$(tr ' ' '\n' <<<"${FIO[$op]}" | grep . | median)
	zm=$(tr ' ' '\n' <<<"${ZN[$op]}" | grep . | median)
	ratio=$(awk -v z="$zm" -v f="$fm" 'BEGIN { printf "%.3f", z / f }')
	printf "# median %-5s fio %.3f GB/s, zinc %.3f GB/s, zinc/fio %s\n" "$op" "$fm" "$zm" "$ratio"
	awk -v r="$ratio" 'BEGIN { exit !(r >= 0.95) }' || status=1
done
exit $status
