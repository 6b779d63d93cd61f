#!/bin/sh
# Build and test dtctl on a lent GPU machine (the `device` tool) that has CUDA, PyTorch
# and a compiler but none of our Debian packages and no network (issue #18).
#
#   scripts/gpu-remote.sh pack     HERE (Debian 12, network to the archive): download the
#                                  runtime and -dev packages of the libraries dtctl links
#                                  into gpu-carry/debs (~20 MB; gpu-carry/ is git-ignored)
#   scripts/gpu-remote.sh build    THERE: unpack them into gpu-carry/root (dpkg-deb -x, or
#                                  ar + tar where there is no dpkg), find NCCL (the CUDA
#                                  toolkit's, else PyTorch's nvidia-nccl wheel), and build
#                                  everything with CUDA for the GPU it sees (make -j)
#   scripts/gpu-remote.sh env      print the exports the build uses (pkg-config, headers,
#                                  RUNPATH of the carried libraries): eval "$(... env)"
#   scripts/gpu-remote.sh test     THERE: `DT_REQUIRE_GPU=1 make trainer-gpu-test`, then
#                                  compute-sanitizer memcheck and racecheck over it
#   scripts/gpu-remote.sh e2e      THERE: tests/e2e/test_gpu_node.py + test_trainer_gpu.py
#                                  under DT_REQUIRE_GPU=1 (dtctl on the GPU node)
#   scripts/gpu-remote.sh bench    THERE: bench/trainer_gpu.py -> $OUT/trainer_gpu.json
#
# One device call then does it all (carry the packed folder):
#   run(command="scripts/gpu-remote.sh build && { scripts/gpu-remote.sh test;
#       scripts/gpu-remote.sh e2e; scripts/gpu-remote.sh bench; }", carry=["gpu-carry"])
# (build ~1-2 min on 16 cores; test, e2e and bench a few minutes each: split them
# over calls if the 10-minute limit of one call is near)
# Open MPI is not carried: one GPU hosts one NCCL rank, and multi-rank tests run on CPUs
# here.  Everything it does is printed; it changes nothing outside the checkout.
set -eu
cd "$(dirname "$0")/.."
TOP=$PWD
CARRY=$TOP/gpu-carry
ROOT=$CARRY/root
MA=x86_64-linux-gnu
# the libraries of Makefile's PKGS (runtime + headers/.pc), OpenBLAS (+ its Fortran runtime), cmocka for the
# GPU twin tests, and make + pkgconf in case the machine has neither
DEBS="libyaml-0-2 libyaml-dev libssh2-1 libssh2-1-dev libmicrohttpd12 libmicrohttpd-dev
libgnutls30 libjansson4 libjansson-dev libsqlite3-0 libsqlite3-dev libnettle8 nettle-dev
libssl3 libssl-dev libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev
libgfortran5 libquadmath0 libcmocka0 libcmocka-dev make pkgconf pkgconf-bin libpkgconf3"

say() { echo "gpu-remote: $*" >&2; }
die() { say "$*"; exit 1; }

pack() {
	command -v apt-get >/dev/null || die "pack runs on the Debian 12 machine (apt-get download)"
	rm -rf "$CARRY/debs" && mkdir -p "$CARRY/debs"
	# apt-get download as root warns that _apt cannot write here; harmless
	# shellcheck disable=SC2086
	(cd "$CARRY/debs" && apt-get download -qq $DEBS 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
	n=$(ls "$CARRY/debs" | wc -l)
	[ "$n" -eq "$(echo $DEBS | wc -w)" ] || die "downloaded $n of $(echo $DEBS | wc -w) packages"
	say "packed $n packages, $(du -sh "$CARRY/debs" | cut -f1), in $CARRY/debs"
}

unpack_one() {
	if command -v dpkg-deb >/dev/null; then
		dpkg-deb -x "$1" "$ROOT"
	else
		# a .deb is an ar archive: debian-binary, control.tar.*, data.tar.*
		tmp=$(mktemp -d) && (cd "$tmp" && ar x "$1") &&
			tar -xf "$tmp"/data.tar.* -C "$ROOT" && rm -rf "$tmp"
	fi
}

unpack() {
	[ -d "$CARRY/debs" ] || die "no $CARRY/debs: run 'scripts/gpu-remote.sh pack' on the Debian machine and carry gpu-carry"
	rm -rf "$ROOT" && mkdir -p "$ROOT"
	for d in "$CARRY"/debs/*.deb; do
		unpack_one "$d" || die "cannot unpack $d"
	done
	# Debian's update-alternatives links are not made by dpkg-deb -x: libblas.so/liblapack.so
	# and openblas.pc live under openblas-pthread/
	ob=$ROOT/usr/lib/$MA/openblas-pthread
	ln -sf "$ob/libblas.so.3" "$ROOT/usr/lib/$MA/libblas.so.3"
	ln -sf "$ob/libopenblas.so.0" "$ROOT/usr/lib/$MA/libopenblas.so.0"
	# libssh2.pc and libmicrohttpd.pc name zlib and gnutls in Requires.private, which
	# pkg-config insists on even for --cflags; only static links would use them, and the
	# shared libraries are the machine's own (or carried): empty stand-ins
	mkdir -p "$ROOT/usr/lib/$MA/pkgconfig"
	for pc in zlib gnutls; do
		printf 'Name: %s\nDescription: stand-in (gpu-remote.sh; shared linking only)\nVersion: 99\n' \
			"$pc" > "$ROOT/usr/lib/$MA/pkgconfig/$pc.pc"
	done
	mkdir -p "$CARRY/bin"
	ln -sf "$ROOT/usr/bin/make" "$CARRY/bin/make"
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$ROOT/usr/lib/$MA" "$ROOT/usr/bin/pkgconf" \
		> "$CARRY/bin/pkg-config" && chmod +x "$CARRY/bin/pkg-config"
	say "unpacked $(ls "$CARRY"/debs/*.deb | wc -l) packages into $ROOT"
}

# NCCL: the toolkit's, else the one PyTorch's wheels bring (nvidia-nccl-cu13)
find_nccl() {
	cuda=${CUDA_HOME:-/usr/local/cuda}
	# the toolkit's own NCCL: the Makefile finds it (nothing to say here)
	[ ! -f "$cuda/include/nccl.h" ] || return 0
	py=$(command -v python3 || true)
	[ -n "$py" ] || return 0
	d=$("$py" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
	[ -n "$d" ] && [ -f "$d/include/nccl.h" ] || return 0
	# -lnccl wants libnccl.so; the wheel has only libnccl.so.2
	mkdir -p "$CARRY/nccl/lib"
	ln -sfn "$d/include" "$CARRY/nccl/include"
	ln -sf "$d/lib/libnccl.so.2" "$CARRY/nccl/lib/libnccl.so.2"
	ln -sf libnccl.so.2 "$CARRY/nccl/lib/libnccl.so"
	echo "$CARRY/nccl"
}

# Our programs find the carried libraries through their RPATH (also for the dlopen of
# libssh2), not LD_LIBRARY_PATH: that would reach the ranks too and give PyTorch's
# Python our libssl/gnutls instead of the machine's own.
LIBDIRS="$ROOT/usr/lib/$MA:$ROOT/usr/lib/$MA/openblas-pthread"
env_lines() {
	# the machine's own make and pkg-config first; the carried ones as a fallback
	echo "export PATH=\"\$PATH\":'$CARRY/bin'"
	echo "export PKG_CONFIG_LIBDIR='$ROOT/usr/lib/$MA/pkgconfig:$ROOT/usr/share/pkgconfig:$ROOT/usr/lib/$MA/openblas-pthread/pkgconfig'"
	echo "export PKG_CONFIG_SYSROOT_DIR='$ROOT'"
	# Debian's multiarch headers (openssl/opensslconf.h) are outside pkg-config's -I
	echo "export C_INCLUDE_PATH='$ROOT/usr/include/$MA'"
	# DT_RPATH (--disable-new-dtags), not DT_RUNPATH: it also serves the libraries'
	# own needs (libopenblas -> libgfortran, libssh2 -> libcrypto)
	echo "export LDFLAGS='-Wl,--disable-new-dtags,-rpath,$LIBDIRS${NCCL_HOME:+:$NCCL_HOME/lib}'"
}

build() {
	unpack
	NCCL_HOME=$(find_nccl)
	eval "$(env_lines)"
	command -v cc >/dev/null || die "no C compiler on this machine (nvcc needs one too)"
	command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
		die "no nvcc (CUDA_HOME=${CUDA_HOME:-/usr/local/cuda})"
	say "NCCL: ${NCCL_HOME:-the CUDA toolkit's, or none (the trainer builds without it)}"
	say "pkg-config: $(pkg-config --modversion yaml-0.1 jansson libmicrohttpd sqlite3 nettle openblas | tr '\n' ' ')"
	make -j"$(nproc)" ${NCCL_HOME:+NCCL_HOME="$NCCL_HOME"} all
}

test_gpu() {
	NCCL_HOME=$(find_nccl)
	eval "$(env_lines)"
	make ${NCCL_HOME:+NCCL_HOME="$NCCL_HOME"} DT_REQUIRE_GPU=1 trainer-gpu-test
	t=build/dev/gpu-tests/test_trainer_gpu
	if command -v compute-sanitizer >/dev/null; then
		for tool in memcheck racecheck; do
			say "compute-sanitizer --tool $tool $t"
			DT_REQUIRE_GPU=1 compute-sanitizer --tool "$tool" --error-exitcode 9 "$t"
		done
	else
		say "compute-sanitizer not found: not run"
	fi
}

# the GPU node tests (tests/e2e/test_gpu_node.py: nodes, bf16/fp16 training, DDP and
# Accelerate scripts, a sweep, cancel) and the CUDA twins, with the machine's python3
# (the one with PyTorch and pytest); a skip is a failure here
e2e_gpu() {
	NCCL_HOME=$(find_nccl)
	eval "$(env_lines)"
	DT_REQUIRE_GPU=1 make ${NCCL_HOME:+NCCL_HOME="$NCCL_HOME"} PYTHON="$(command -v python3)" e2e \
		E2E_PATHS="tests/e2e/test_gpu_node.py tests/e2e/test_trainer_gpu.py" \
		E2E_XML="${OUT:-build/results}/e2e-gpu.xml"
}

# issue #18's benchmark: dttrain vs PyTorch eager and torch.compile (bench/trainer_gpu.py)
bench_gpu() {
	python3 bench/trainer_gpu.py --dttrain bin/dttrain --json "${OUT:-build}/trainer_gpu.json" "$@"
}

case "${1:-}" in
pack) pack ;;
build) build ;;
env) NCCL_HOME=$(find_nccl); env_lines ;;
test) test_gpu ;;
e2e) e2e_gpu ;;
bench) shift; bench_gpu "$@" ;;
*) echo "usage: scripts/gpu-remote.sh pack | build | env | test | e2e | bench [ARGS]" >&2; exit 2 ;;
esac
