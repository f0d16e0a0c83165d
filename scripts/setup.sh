#!/usr/bin/env bash
# Installs the Debian packages zinc builds and tests with. Idempotent: quick when they are
# already there. Needs root (or sudo). CUDA is optional and found in /usr/local/cuda.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git liburing-dev libhwloc-dev libcjson-dev libpcre2-dev
      libcriterion-dev zlib1g-dev libopenmpi-dev openmpi-bin libopenblas-dev fio valgrind
      clang libclang-rt-dev libomp-dev # clang + compiler-rt + OpenMP: scripts/ci-fuzz.sh
      gnuplot-nox # zinc bench step --plot
      python3-torch) # the float64 outside checks: scripts/llama_check.py, qlora_check.py

missing=()
for p in "${pkgs[@]}"; do
	[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "setup: all ${#pkgs[@]} packages present"
	exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
