#!/usr/bin/env bash
# Runs the core tests under valgrind (memcheck). Builds without -march=native into
# build-vg, because valgrind does not decode every AVX-512 instruction.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-vg scripts/build.sh -DZINC_CUDA=OFF -DZINC_NATIVE=OFF > /dev/null
tests=${*:-"test_config test_plan test_dtype test_adamw test_arena test_device test_kernels test_kernels_optim test_safetensors test_data test_model test_comm test_lr test_engine test_engine_faults test_nvme_aio test_nvme_swap test_nvme_engine"}
status=0
for t in $tests; do
	[ -x "build-vg/$t" ] || { echo "valgrind: $t not built, skipped"; continue; }
	if valgrind -q --trace-children=yes --leak-check=full --errors-for-leak-kinds=definite \
		--error-exitcode=99 "build-vg/$t" -j1 > "build-vg/$t.valgrind.log" 2>&1; then
		echo "valgrind: $t clean"
	else
		echo "valgrind: $t FAILED (build-vg/$t.valgrind.log)"; status=1
	fi
done
exit $status
