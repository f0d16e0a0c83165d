#!/usr/bin/env bash
# Downloads the .deb files named in scripts/device/debs.list into DIR (default .debs/,
# gitignored) so scripts/device/gpu-check.sh can build zinc on a machine with no network
# and none of Debian's -dev packages. Run here (apt works); nothing is installed. As root
# apt downloads as the _apt user, so DIR is made writable for it.
#
#   scripts/device/fetch-debs.sh [DIR]
#
# DIR's old .deb files are removed first (nothing else in it). Prints the total size: the
# working tree plus .debs must stay under 64 MiB. The CPU test
# devcheck/sysroot_configure_from_debs_alone runs this into its build dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
list=scripts/device/debs.list
dir=${1:-.debs}
mapfile -t pkgs < <(grep -v '^#' "$list" | awk '{for (i = 2; i <= NF; i++) print $i}')
[ ${#pkgs[@]} -gt 0 ] || { echo "fetch-debs: no packages in $list" >&2; exit 1; }

mkdir -p "$dir"
rm -f "$dir"/*.deb
chmod 777 "$dir" # apt downloads as the _apt user
if ! (cd "$dir" && apt-get download -q "${pkgs[@]}" > /dev/null); then
	echo "fetch-debs: apt-get download failed (no network, or stale package lists: run" \
	     "'apt-get update' as root first)" >&2
	exit 1
fi
got=$(find "$dir" -maxdepth 1 -name "*.deb" | wc -l)
if [ "$got" -ne ${#pkgs[@]} ]; then
	echo "fetch-debs: asked for ${#pkgs[@]} packages, got $got .deb files in $dir" >&2
	exit 1
fi
echo "fetch-debs: $got packages in $dir, $(du -sh "$dir" | cut -f1) in all ($(du -sb "$dir" | cut -f1) bytes)"
