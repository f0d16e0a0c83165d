# shellcheck shell=bash disable=SC2154 # S, B, D, OUT, dry, repo: set by gpu-check.sh
# The device check's sysroot and configure, sourced by scripts/device/gpu-check.sh (which
# defines say and stop): unpacking the carried .debs into $S, the environment that makes
# pkgconf and CMake see only the sysroot, the configure, and the checks that the configure
# and the build took every pkg-config module of CMakeLists.txt from the sysroot alone.
# Variables from gpu-check.sh: S (sysroot), B (build dir), D (.debs), OUT, dry, repo.

# debs_listed: the packages of debs.list, one a line
debs_listed() {
	grep -v '^#' scripts/device/debs.list | awk '{ for (i = 2; i <= NF; i++) print $i }'
}

# has_line TEXT: whether a line of the input is TEXT. It reads the whole input: an early
# exit (grep -q, awk's exit) would end the writer with SIGPIPE, which under pipefail
# turns the pipeline's answer into a failure at random (ldconfig -p writes many lines).
has_line() {
	awk -v t="$1" '$0 == t { f = 1 } END { exit !f }'
}

# debs_missing: the packages of debs.list without a .deb in $D, on one line
debs_missing() {
	local p
	for p in $(debs_listed); do
		ls "$D/$p"_*.deb > /dev/null 2>&1 || printf '%s ' "$p"
	done
}

# debs_extra: the .debs in $D of packages debs.list does not name, on one line (the
# sysroot unpacks them too, so a test that must see the list alone refetches)
debs_extra() {
	local f p
	for f in "$D"/*.deb; do
		[ -e "$f" ] || continue
		p=${f##*/}
		debs_listed | has_line "${p%%_*}" || printf '%s ' "${p%%_*}"
	done
}

# pc_modules: "PREFIX module..." for each pkg_check_modules / pkg_search_module call of
# CMakeLists.txt (comments dropped, calls over several lines joined)
pc_modules() {
	sed 's/#.*//' CMakeLists.txt | tr '\n' ' ' |
		grep -oE 'pkg_(check_modules|search_module) *\([^)]*\)' |
		sed -E 's/^[a-z_]+ *\( *//; s/\)$//' |
		awk '{ m = $1; for (i = 2; i <= NF; i++)
		         if ($i !~ /^(REQUIRED|QUIET|IMPORTED_TARGET|GLOBAL|NO_CMAKE_PATH|NO_CMAKE_ENVIRONMENT_PATH)$/) m = m " " $i
		       print m }'
}

# pc_libs PREFIX: the files CMake resolved for the module's -l libraries (CMakeCache.txt's
# pkgcfg_lib_PREFIX_NAME; NAME-NOTFOUND when none), one per line. The C library's own
# (m, pthread, dl, rt, c) come with the compiler and are left out.
pc_libs() {
	local n
	for n in $(sed -n "s/^$1_LIBRARIES:INTERNAL=//p" "$B/CMakeCache.txt" | tr ';' ' '); do
		case "$n" in m | pthread | dl | rt | c) continue ;; esac
		sed -n "s/^pkgcfg_lib_$1_$n:FILEPATH=//p" "$B/CMakeCache.txt" | grep . || echo "$n-NOTFOUND"
	done
}

# link_escape FILE: a link of the sysroot that leads out of it must name a library the
# system's loader lists (ldconfig -p: libz.so.1, which any machine with the library has),
# never a file only this machine happens to have (libz.so.1.2.13). Prints the escape and
# succeeds when FILE breaks that rule.
link_escape() {
	local l=$1 t
	for _ in 1 2 3 4 5 6 7 8; do
		[ -L "$l" ] || return 1
		t=$(readlink "$l")
		case "$t" in
		"$S"/*) l=$t ;;
		/*)
			ldconfig -p 2> /dev/null | awk '{ print $NF }' | has_line "$t" && return 1
			echo "$1 -> $t: outside $S and not a library ldconfig lists"
			return 0
			;;
		*) l=${l%/*}/$t ;;
		esac
	done
	return 1
}

# configure_error LOG: the configure's reason, a missing pkg-config package first
configure_error() {
	local p
	p=$(grep -m1 -oE "Package '[^']*'[^:]* not found" "$1")
	if [ -n "$p" ]; then
		echo "$p: add its -dev package to scripts/device/debs.list"
	else
		grep -m1 -A1 'CMake Error' "$1" | tail -1 | sed 's/^ *//' | grep . || last_line "$1"
	fi
}

# configured_cuda LOG: stops unless the configure summary in LOG says "CUDA ON"
configured_cuda() {
	local line
	line=$(grep -E '^(-- )?  CUDA ' "$1" | tail -1 | sed 's/^-- //')
	[ -n "$line" ] || stop "the configure summary has no CUDA line (see $1)"
	grep -qE '^ *CUDA +ON( |$)' <<< "$line" ||
		stop "GPU mode but the configure summary says '$(echo $line)': CMake found no usable nvcc (see $1)"
}

# configured_from_sysroot: stops unless every pkg-config module of CMakeLists.txt was
# found and each library it links is a shared library inside the sysroot whose links lead
# only to the sysroot or to a library the system's loader lists ($B/CMakeCache.txt). A
# module debs.list does not carry, a library found outside $S, or a -dev package's
# dangling link (CMake then takes the .a or the system's copy) stops here, at configure
# time, on any machine: on the device such a build would not link, or link what is not
# there.
configured_from_sysroot() {
	local p mods libs l bad=""
	while read -r p mods; do
		if ! grep -qx "${p}_FOUND:INTERNAL=1" "$B/CMakeCache.txt"; then
			bad+=" $mods (not found)"
			continue
		fi
		libs=$(pc_libs "$p")
		for l in $libs; do
			case "$l" in
			*.a) bad+=" $mods ($l: a static archive, the shared library's link dangles)" ;;
			"$S"/*) [ -e "$l" ] || bad+=" $mods ($l does not exist)" ;;
			*) bad+=" $mods ($l, outside $S)" ;;
			esac
			l=$(link_escape "$l") && bad+=" $mods ($l)"
		done
		echo "configure: $mods from the sysroot: ${libs:-no library}" >> "$OUT/setup.log"
	done < <(pc_modules)
	[ -z "$bad" ] ||
		stop "configure did not take every pkg-config module from the sysroot alone:$bad: each module needs its -dev package and runtime library in scripts/device/debs.list (docs/gpu-check.md)"
}

# a .deb's file list and unpacking: dpkg-deb where there is one, else ar + tar
deb_data() {
	local t
	t=$(mktemp -d)
	(cd "$t" && ar x "$OLDPWD/$1" && ls data.tar*) | sed "s|^|$t/|"
}

deb_list() {
	local d
	if command -v dpkg-deb > /dev/null; then
		dpkg-deb -c "$1" | awk '{print $6}'
	else
		d=$(deb_data "$1")
		tar -t -f "$d"
		rm -rf "${d%/*}"
	fi
}

deb_unpack() {
	local d
	if command -v dpkg > /dev/null; then
		dpkg -x "$1" "$2"
	else
		d=$(deb_data "$1")
		tar -x -f "$d" -C "$2"
		rm -rf "${d%/*}"
	fi
}

# sonames (libfoo.so.N) a .deb ships
deb_sonames() {
	deb_list "$1" | grep -oE 'lib[^/]*\.so\.[0-9]+$' | sort -u
}

# A -dev package's link (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) names a path
# of the target system: an absolute target is taken inside the sysroot when it is there.
# When it is not (its runtime package is a fallback the system already has), the link is
# pointed at the system's copy of the library (ldconfig -p), so zinc links the library it
# loads at run time, and never a file that only this machine happens to have.
relink_to_system() {
	local l name sys t
	for l in "$S"/usr/lib/x86_64-linux-gnu/lib*.so "$S"/lib/x86_64-linux-gnu/lib*.so; do
		[ -L "$l" ] || continue
		t=$(readlink "$l")
		case "$t" in
		/*)
			if [ -e "$S$t" ]; then
				ln -sfn "$S$t" "$l"
				continue
			fi
			;;
		*) [ ! -e "$l" ] || continue ;;
		esac
		name=${l##*/}
		sys=$(ldconfig -p 2> /dev/null |
			awk -v n="$name." 'index($1, n) == 1 && /x86-64/ && !s { s = $NF }
					   END { if (s != "") print s }')
		if [ -n "$sys" ]; then
			ln -sfn "$sys" "$l"
			echo "sysroot: $name -> $sys (the system's copy)"
		else
			echo "sysroot: $name dangles (no runtime package, no system copy): not linkable"
		fi
	done
}

# Unpacks core packages always and fallback packages only where the system lacks one of
# their sonames, so LD_LIBRARY_PATH never shadows a newer system library.
make_sysroot() {
	local list=scripts/device/debs.list kind pkg f missing so
	local sys_libs
	if ! ls "$D"/*.deb > /dev/null 2>&1; then
		echo "no $D/*.deb: run scripts/device/fetch-debs.sh here and carry .debs"
		return 1
	fi
	rm -rf "$S"
	mkdir -p "$S"
	sys_libs=$(ldconfig -p 2>/dev/null | awk '{print $1}' | sort -u)
	for f in "$D"/*.deb; do
		pkg=${f##*/}
		pkg=${pkg%%_*}
		kind=$(awk -v p="$pkg" '!/^#/ { for (i = 2; i <= NF; i++) if ($i == p) print $1 }' "$list")
		if [ "$kind" = fallback ]; then
			missing=""
			for so in $(deb_sonames "$f"); do
				grep -qxF "$so" <<< "$sys_libs" || missing+=" $so"
			done
			if [ -z "$missing" ]; then
				echo "sysroot: $pkg skipped (system has its libraries)"
				continue
			fi
			echo "sysroot: $pkg unpacked (system lacks$missing)"
		elif [ "$kind" != core ]; then
			echo "sysroot: $pkg is not in $list: unpacked anyway"
		fi
		deb_unpack "$f" "$S" || return 1
	done
	relink_to_system
	# Requires.private (boxfort, libffi, libgit2, nanomsg) matters for static linking
	# only, but pkgconf resolves it for --cflags too, and those -dev packages are not
	# fetched: drop it from the sysroot's copy.
	sed -i '/^Requires.private:/d' "$S/usr/lib/x86_64-linux-gnu/pkgconfig/criterion.pc"
	echo "sysroot: $(du -sh "$S" | cut -f1) in $S"
}

setup_env() {
	local ma=x86_64-linux-gnu
	export PATH=/usr/local/cuda/bin:$PATH:$S/usr/bin
	export LD_LIBRARY_PATH=$S/usr/lib/$ma:$S/usr/lib/$ma/openblas-pthread:$S/lib/$ma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export PKG_CONFIG_LIBDIR=$S/usr/lib/$ma/pkgconfig:$S/usr/lib/$ma/openblas-pthread/pkgconfig:$S/usr/share/pkgconfig
	export PKG_CONFIG_SYSROOT_DIR=$S
	unset PKG_CONFIG_PATH
	export CMAKE_PREFIX_PATH=$S/usr
}

show_env() {
	local t p mods m
	echo "repo $repo, sysroot $S, build $B, dry=${dry:-0}, $(nproc) cores"
	uname -a
	head -4 /etc/os-release
	for t in cc gcc nvcc cmake; do
		printf '%-6s %s: ' "$t" "$(command -v $t || echo missing)"
		$t --version 2>&1 | head -1
	done
	echo "PATH=$PATH"
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	echo "PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR"
	echo "PKG_CONFIG_SYSROOT_DIR=$PKG_CONFIG_SYSROOT_DIR"
	while read -r p mods; do
		for m in $mods; do
			echo "pkgconf $m $("$S/usr/bin/pkgconf" --modversion "$m" 2>&1): $("$S/usr/bin/pkgconf" --cflags --libs "$m" 2>&1)"
		done
	done < <(pc_modules)
}

configure() {
	local cuda=ON
	[ -z "$dry" ] || cuda=${ZN_GPU_CHECK_CUDA:-OFF}
	rm -rf "$B"
	cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZINC_CUDA="$cuda" \
		-DCMAKE_CUDA_ARCHITECTURES=90 -DZINC_MPI=OFF \
		-DPKG_CONFIG_EXECUTABLE="$S/usr/bin/pkgconf" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
}

# Fails unless zinc and a test link every pkg-config library from the sysroot, the compile
# lines put the sysroot's include dirs first, and zinc loads the core libraries from there
# with LD_LIBRARY_PATH unset (RUNPATH): the system's copies, if any, were not used.
check_sysroot_use() {
	local bad=0 lib link v test_link p mods
	# the link line, and with CUDA as linker language its response files
	link=$(cat "$B"/CMakeFiles/zinc.dir/link.txt "$B"/CMakeFiles/zinc.dir/*.rsp 2>/dev/null)
	v=$(find "$B"/CMakeFiles -name 'test_*.dir' | head -1)
	test_link=$(cat "$v"/link.txt "$v"/*.rsp 2>/dev/null)
	while read -r p mods; do
		for lib in $(pc_libs "$p"); do
			v=$link
			[ "$p" != CRITERION ] || v=$test_link
			if grep -qF -- "$lib" <<< "$v"; then
				echo "links $lib"
			else
				echo "does NOT link $lib ($mods) from the sysroot: $v"
				bad=1
			fi
		done
	done < <(pc_modules)
	# imported targets pass their include dirs as -isystem: searched before /usr/include
	local inc=()
	for v in "$S/usr/include" "$S/usr/include/x86_64-linux-gnu/openblas-pthread" \
		 "$S/usr/include/cjson"; do
		if grep -qE -- "(-I|-isystem )$v( |\\\\?\")" "$B/compile_commands.json"; then
			echo "compile lines use $v"
		else
			echo "compile lines do NOT use $v"
			bad=1
		fi
		inc+=(-isystem "$v")
	done
	# where the compiler finds each header with those flags
	printf '#include <%s>\n' liburing.h hwloc.h cjson/cJSON.h cblas.h zlib.h pcre2.h \
		criterion/criterion.h | cc -DPCRE2_CODE_UNIT_WIDTH=8 "${inc[@]}" -M -x c - -o - |
		tr ' \\' '\n\n' | grep -E '/(liburing|hwloc|cJSON|cblas|zlib|pcre2|criterion)\.h$' |
		while read -r v; do
			echo "header $v"
			case "$v" in "$S"/*) ;; *) echo "  ^ NOT from the sysroot"; exit 1 ;; esac
		done || bad=1
	echo "ldd $B/zinc (LD_LIBRARY_PATH unset):"
	env -u LD_LIBRARY_PATH ldd "$B/zinc" | grep -E 'uring|hwloc|cjson|blas|libz|pcre2|gfortran|gomp|cuda|not found'
	if env -u LD_LIBRARY_PATH ldd "$B/zinc" | grep -E 'uring|hwloc|cjson|openblas' |
	   grep -vqF "$S/"; then
		echo "zinc loads one of liburing, hwloc, cJSON, OpenBLAS from outside the sysroot"
		bad=1
	fi
	return $bad
}
