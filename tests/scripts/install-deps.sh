#!/usr/bin/env bash
# Installs what rcpipe needs on Debian 12, only if something is missing.
set -euo pipefail

pkgs=(meson ninja-build pkg-config gcc libc6-dev libhiredis-dev liburcu-dev check
      redis-server redis-tools python3 libasan8 libubsan1 libtsan2 valgrind)
# Fuzzing (tests/fuzz, -Dfuzz=true): clang and its runtime libraries
# (libFuzzer, ASan, UBSan), which clang only recommends.
pkgs+=(clang libclang-rt-14-dev)
# TLS (lib/tls.c, -Dtls=auto finds it) and the test certificates made at
# test time (tests/scripts/tls-certs.sh).
pkgs+=(libssl-dev openssl)
# The loop adapters' example and integration tests (rcpipe/libevent.h,
# rcpipe/libuv.h are header-only: the library itself links neither).
pkgs+=(libevent-dev libuv1-dev)
# The reference manual (docs/reference): go-md2man turns its pages into man
# pages at build time; man-db's man checks that they render without a warning.
pkgs+=(go-md2man man-db)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts a system redis-server on 6379; rcpipe's scripts never use
# it (they start their own on free ports), so it is left alone.
