#!/usr/bin/env bash
# Type-check and test lockgate: creates .venv if missing, installs lockgate with its test
# extras (once), makes sure PostgreSQL, Redis and NATS JetStream run on 127.0.0.1
# (scripts/services.sh; LOCKGATE_SKIP_SERVICES=1 skips this), then runs ruff (lint and
# format check, configured in pyproject.toml), mypy and pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/unit -x`.
# Exits non-zero if ruff finds anything, or mypy or pytest fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_common.sh

ensure_venv test

if [ "${LOCKGATE_SKIP_SERVICES:-0}" = 1 ]; then
    say "skipping services (LOCKGATE_SKIP_SERVICES=1)"
elif ! bash scripts/services.sh; then
    warn "some services are not running (see above); tests that need them will fail"
fi
bash scripts/browser.sh || warn "chromium/chromedriver missing (see above); the dashboard's browser test will fail"

status=0
# the venv's ruff (the test extra pins its lower bound), over every Python file of the tree
RUFF_PATHS=(lockgate tests bench examples)
say "ruff check ${RUFF_PATHS[*]}"
if ! "$VENV/bin/ruff" check "${RUFF_PATHS[@]}"; then
    warn "ruff check found problems: fix them, or run '.venv/bin/ruff check --fix' for the safe fixes"
    status=1
fi
say "ruff format --check ${RUFF_PATHS[*]}"
if ! "$VENV/bin/ruff" format --check "${RUFF_PATHS[@]}"; then
    warn "files are not formatted: run '.venv/bin/ruff format' and commit the result"
    status=1
fi
say "mypy lockgate"
"$VENV/bin/python" -m mypy lockgate || status=1
say "pytest -q $*"
# a test the hang guard kills takes the run down with it: its traceback goes here
export LOCKGATE_HANG_DUMP="${TMPDIR:-/tmp}/lockgate-hang-$$.txt"
rm -f "$LOCKGATE_HANG_DUMP"
"$VENV/bin/python" -m pytest -q "$@" || status=1
if [ -s "$LOCKGATE_HANG_DUMP" ] && grep -q "Thread 0x\|Current thread" "$LOCKGATE_HANG_DUMP"; then
    warn "the hang guard stopped the run:"
    cat "$LOCKGATE_HANG_DUMP" >&2
fi
rm -f "$LOCKGATE_HANG_DUMP"

if [ "$status" -ne 0 ]; then
    say "FAILED (see above)"
else
    say "all checks passed"
fi
exit "$status"
