#!/usr/bin/env bash
# Installs what building the rival engines (crates/tablinum-peers) needs:
# libclang for librocksdb-sys's bindgen, and a C++ compiler for RocksDB itself.
#
# Idempotent and quiet: does nothing when everything is already present.
# Runs as root (no sudo needed) or as a user with working passwordless sudo;
# fails with a clear message otherwise.
set -euo pipefail

log() { printf 'install-peer-deps: %s\n' "$*" >&2; }

have_libclang() {
    # bindgen (librocksdb-sys) loads libclang at build time. On Debian the
    # package that provides it with its headers is libclang-dev.
    if [ -n "${LIBCLANG_PATH:-}" ] && compgen -G "${LIBCLANG_PATH}/libclang*.so*" >/dev/null 2>&1; then
        return 0
    fi
    if command -v dpkg-query >/dev/null 2>&1; then
        [ "$(dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null || true)" = "install ok installed" ]
        return
    fi
    compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null 2>&1 \
        || compgen -G '/usr/lib/*-linux-gnu/libclang.so' >/dev/null 2>&1 \
        || compgen -G '/usr/lib64/libclang.so' >/dev/null 2>&1
}

have_cxx() {
    command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1
}

missing=()
have_libclang || missing+=(libclang-dev)
have_cxx || missing+=(g++)
if ! command -v clang >/dev/null 2>&1; then
    # bindgen asks the clang binary for the system include paths; without it
    # it falls back to libclang's resource dir, which works on Debian but not
    # everywhere. Cheap insurance.
    missing+=(clang)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]} and apt-get is not available; install them by hand"
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    log "missing ${missing[*]}: run this script as root (or with passwordless sudo)"
    exit 1
fi

log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_log="$(mktemp)"
trap 'rm -f "$apt_log"' EXIT
# apt's chatter goes to a log that is shown only if a step fails.
if ! ${SUDO[@]+"${SUDO[@]}"} apt-get update -qq >"$apt_log" 2>&1 \
    || ! ${SUDO[@]+"${SUDO[@]}"} apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    log "apt-get failed to install ${missing[*]}"
    exit 1
fi

if ! have_libclang; then
    log "libclang still not found after installing ${missing[*]}"
    exit 1
fi
log "done"
