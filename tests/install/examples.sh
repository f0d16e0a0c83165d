#!/usr/bin/env bash
# The public API from outside the tree (docs/api.md): installs the build into a temporary
# prefix, checks that only the public header went in, compiles examples/train.c with
# nothing but `pkg-config --cflags --libs zinc`, runs it and examples/train.py (ctypes over
# the installed libzinc.so) and asserts that their per-step losses equal those `zinc
# train` prints for the same settings.
#
#     tests/install/examples.sh SRC_DIR BUILD_DIR   (ctest: install_examples)
#
# ZN_CC: the compiler that built the library (default cc). ZN_SANITIZE=1 (a sanitizer
# build): the example is compiled with the same sanitizers and python3 runs with their
# runtimes preloaded (leak checks off: python's own allocations).
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" || {
	cat "$tmp/install.log"; fail "cmake --install"; }
headers=$(cd "$tmp/prefix" && find include -type f | sort | tr '\n' ' ')
[ "$headers" = "include/zinc.h " ] || fail "installed headers: '$headers', want include/zinc.h only"
pc=$(find "$tmp/prefix" -name zinc.pc)
[ -n "$pc" ] || fail "no zinc.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$tmp/prefix/bin/zinc" "$libdir/libzinc.so" "$libdir/libzinc.a"; do
	[ -e "$f" ] || fail "$f not installed"
done

export PKG_CONFIG_PATH=$(dirname "$pc")
cc=${ZN_CC:-cc}
cflags=()
if [ "${ZN_SANITIZE:-0}" = 1 ]; then
	cflags=(-fsanitize=address,undefined)
fi
# shellcheck disable=SC2046 # pkg-config's words
"$cc" "${cflags[@]}" "$src/examples/train.c" $(pkg-config --cflags --libs zinc) -o "$tmp/train" ||
	fail "examples/train.c does not compile with pkg-config --cflags --libs zinc alone"

losses() { grep '^step ' "$1" | grep -o 'loss [0-9.-]*' || true; }
pyenv=()
if [ "${ZN_SANITIZE:-0}" = 1 ]; then
	asan=$("$cc" -print-file-name=libasan.so)
	ubsan=$("$cc" -print-file-name=libubsan.so)
	pyenv=(LD_PRELOAD="$asan $ubsan" ASAN_OPTIONS=detect_leaks=0)
fi

# The three programs with the same settings ($@, zinc train's flags): the same losses.
same_losses() {
	local name=$1 steps=$2
	shift 2
	"$tmp/prefix/bin/zinc" train "$@" --steps "$steps" --steps-per-print 1 \
		> "$tmp/zinc.out" || fail "zinc train: $(cat "$tmp/zinc.out")"
	losses "$tmp/zinc.out" > "$tmp/want"
	[ "$(wc -l < "$tmp/want")" = "$steps" ] ||
		fail "zinc train printed $(wc -l < "$tmp/want") step lines, want $steps"
	LD_LIBRARY_PATH=$libdir "$tmp/train" "$@" --steps "$steps" > "$tmp/c.out" ||
		fail "examples/train.c: $(cat "$tmp/c.out")"
	losses "$tmp/c.out" > "$tmp/c"
	diff "$tmp/want" "$tmp/c" || fail "$name: examples/train.c's losses differ from zinc train's"
	echo "$name: examples/train.c: $(tr '\n' ' ' < "$tmp/c")= zinc train's"
	if ! command -v python3 > /dev/null; then
		echo "$name: examples/train.py: skipped, no python3 on PATH"
		return
	fi
	env "${pyenv[@]}" ZINC_LIBRARY="$libdir/libzinc.so" python3 "$src/examples/train.py" \
		"$@" --steps "$steps" > "$tmp/py.out" || fail "examples/train.py: $(cat "$tmp/py.out")"
	losses "$tmp/py.out" > "$tmp/py"
	diff "$tmp/want" "$tmp/py" || fail "$name: examples/train.py's losses differ from zinc train's"
	echo "$name: examples/train.py: $(tr '\n' ' ' < "$tmp/py")= zinc train's"
}

# a preset, zinc train's defaults otherwise (seed, lr, schedule, batch, seq)
same_losses preset 4 --model tiny --data "$src/data/demo.txt" --device host
# the engine from outside: zn_engine_create takes zn_net_model's model (no internal
# header), and one step on the file's first window is zinc train's first loss
cat > "$tmp/engine.c" <<'PROG'
#include <stdio.h>
#include <zinc.h>
int main(int argc, char **argv)
{
	struct zn_config cfg;
	struct zn_net *net;
	struct zn_engine *e;
	struct zn_step_stats st;
	int in[64], tg[64], c, n = 0;
	FILE *f = fopen(argv[1], "rb");

	while (f && n < 65 && (c = fgetc(f)) != EOF) { /* text: one token per byte */
		if (n < 64)
			in[n] = c;
		if (n > 0)
			tg[n - 1] = c;
		n++;
	}
	zn_config_defaults(&cfg);
	cfg.runtime.device = ZN_DEVICE_HOST;
	if (n < 65 || argc < 2 || zn_config_validate(&cfg, 1) || zn_net_from_preset(&net, "tiny") ||
	    zn_engine_create(&e, &cfg, zn_net_model(net), &(struct zn_engine_options){
			.seq_len = zn_net_seq(net) }) || zn_engine_step(e, in, tg, &st))
		return fprintf(stderr, "engine.c: %s\n", zn_last_error()), 1;
	printf("step 1/1 | loss %.4f\n", st.loss);
	zn_engine_destroy(e);
	zn_net_destroy(net);
	return 0;
}
PROG
"$cc" "${cflags[@]}" "$tmp/engine.c" $(pkg-config --cflags --libs zinc) -o "$tmp/engine" ||
	fail "a zn_engine_create caller does not compile with zinc.h alone"
LD_LIBRARY_PATH=$libdir "$tmp/engine" "$src/data/demo.txt" > "$tmp/engine.out" ||
	fail "engine.c: $(cat "$tmp/engine.out")"
losses "$tmp/engine.out" > "$tmp/e"
head -1 "$tmp/want" | diff - "$tmp/e" || fail "zn_engine_step's loss is not zinc train's first"
echo "engine: $(cat "$tmp/e") = zinc train's first step"

# a Hugging Face directory (a Llama written by zinc train --steps 0), a shorter --seq
"$tmp/prefix/bin/zinc" train --model llama-tiny --steps 0 --save-final "$tmp/hf" \
	--device host --seed 3 > "$tmp/hf.out" || fail "zinc train --save-final: $(cat "$tmp/hf.out")"
same_losses init-from 3 --init-from "$tmp/hf" --seq 32 --data "$src/data/demo.txt" \
	--device host
