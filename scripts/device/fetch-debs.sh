#!/usr/bin/env bash
# Downloads the .deb files named in scripts/device/debs.list into .debs/ (gitignored) so
# scripts/device/gpu-check.sh can build zinc on a machine with no network and none of
# Debian's -dev packages. Run here (apt works), as root or with sudo; nothing is installed.
# Prints the total size: the working tree plus .debs must stay under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
list=scripts/device/debs.list
mapfile -t pkgs < <(grep -v '^#' "$list" | awk '{for (i = 2; i <= NF; i++) print $i}')
[ ${#pkgs[@]} -gt 0 ] || { echo "fetch-debs: no packages in $list" >&2; exit 1; }

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
rm -rf .debs
mkdir -p .debs
chmod 777 .debs # apt downloads as the _apt user
if ! (cd .debs && apt-get download -q "${pkgs[@]}" > /dev/null); then
	echo "fetch-debs: apt-get download failed; try '$SUDO apt-get update' first" >&2
	exit 1
fi
got=$(find .debs -name "*.deb" | wc -l)
if [ "$got" -ne ${#pkgs[@]} ]; then
	echo "fetch-debs: asked for ${#pkgs[@]} packages, got $got .deb files" >&2
	exit 1
fi
echo "fetch-debs: $got packages in .debs/, $(du -sh .debs | cut -f1) in all ($(du -sb .debs | cut -f1) bytes)"
