#!/usr/bin/env bash
# Install (when missing) the headless browser the dashboard test drives: Debian's `chromium`
# and `chromium-driver` packages (apt-get; needs root or password-less sudo), and print where
# they are. Idempotent: when both are installed it only checks, in well under a second.
#
# Environment: LOCKGATE_NO_INSTALL=1 never installs (a missing browser is then an error).
# Output (stdout, one line each): `chromium=/path` and `chromedriver=/path`.
# Exit status: 0 when both are there, 1 otherwise (the message says which and why).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_common.sh

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
    else return 1
    fi
}

find_browser() { command -v chromium || command -v chromium-browser; }
find_driver() { command -v chromedriver || { [ -x /usr/bin/chromedriver ] && echo /usr/bin/chromedriver; }; }

if ! find_browser >/dev/null || ! find_driver >/dev/null; then
    [ "${LOCKGATE_NO_INSTALL:-0}" = 1 ] \
        && die "chromium or chromedriver is missing and LOCKGATE_NO_INSTALL=1: install Debian's chromium and chromium-driver yourself"
    command -v apt-get >/dev/null \
        || die "cannot install chromium: apt-get not found (install chromium and its chromedriver with your package manager)"
    as_root true || die "cannot install chromium: needs root or password-less sudo (or install chromium and chromium-driver yourself)"
    say "installing chromium chromium-driver (apt-get)"
    log="${TMPDIR:-/tmp}/lockgate-apt-browser-$$.log"
    if ! as_root apt-get update -qq >"$log" 2>&1; then
        cat "$log" >&2; rm -f "$log"; die "apt-get update failed"
    fi
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            chromium chromium-driver fonts-dejavu-core >"$log" 2>&1; then
        cat "$log" >&2; rm -f "$log"; die "apt-get install chromium chromium-driver failed"
    fi
    rm -f "$log"
fi

browser="$(find_browser)" || die "chromium is still missing after the install"
driver="$(find_driver)" || die "chromedriver is still missing after the install"
echo "chromium=$browser"
echo "chromedriver=$driver"
