#!/usr/bin/env bash
# The install as a user gets it: configure and install rcpipe into a
# temporary prefix, compile every example in docs/examples with pkg-config
# alone (no path into the source tree), check the man pages (every public
# function and type has one under PREFIX/share/man that renders without a
# warning), and run two of the examples (the README's example and the
# libevent cluster program) against a local cluster.
#
#   tests/scripts/install-test.sh [WORK_DIR]     (default: a new temporary dir)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d /tmp/rcp-install.XXXXXX)}
prefix=$work/prefix
cluster=""
cleanup() {
    if [ -n "$cluster" ]; then "$src/tests/scripts/cluster.sh" stop "$cluster" || true; fi
}
trap cleanup EXIT
if [ -z "${1:-}" ]; then trap 'cleanup; rm -rf "$work"' EXIT; fi

meson setup "$work/build" "$src" --prefix "$prefix" -Dtests=false --buildtype=release >/dev/null
ninja -C "$work/build" >/dev/null
meson install -C "$work/build" >/dev/null
pc=$(dirname "$(find "$prefix" -name rcpipe.pc | head -1)")
export PKG_CONFIG_PATH=$pc
libdir=$(pkg-config --variable=libdir rcpipe)
echo "install-test: rcpipe $(pkg-config --modversion rcpipe) in $prefix (libdir $libdir)"

mkdir -p "$work/bin"
n=0
for f in "$src"/docs/examples/*.c; do
    name=$(basename "$f" .c)
    extra=""
    if grep -q 'rcpipe/libevent.h' "$f"; then extra="libevent"; fi
    # shellcheck disable=SC2046
    cc -Wall -Wextra -Werror -pthread "$f" -o "$work/bin/$name" \
        $(pkg-config --cflags --libs rcpipe $extra)
    n=$((n + 1))
done
echo "install-test: $n examples compiled with pkg-config alone"

# The reference manual, as installed (docs/reference/README.md). Without
# go-md2man the build makes no man pages (-Dman=auto): say so, since CI
# installs it (install-deps.sh) and must check them.
if command -v go-md2man >/dev/null; then
    python3 "$src/tests/scripts/refman.py" installed "$prefix"
else
    echo "install-test: go-md2man missing: man pages neither built nor checked"
fi

seed=$("$src/tests/scripts/cluster.sh" start --dir "$work/cluster" 2>/dev/null)
cluster=$work/cluster
# The prefix is outside the loader's path: LD_LIBRARY_PATH, as a user would
# (docs/getting-started.md).
LD_LIBRARY_PATH=$libdir "$work/bin/readme" "$seed"
LD_LIBRARY_PATH=$libdir "$work/bin/libevent_cluster" "$seed" | grep 'replies missing'
echo "install-test: ok"
