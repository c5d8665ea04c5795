#!/usr/bin/env bash
# Type-check and test lockgate: creates .venv if missing, installs lockgate with its test
# extras (once), makes sure PostgreSQL, Redis and NATS JetStream run on 127.0.0.1
# (scripts/services.sh; LOCKGATE_SKIP_SERVICES=1 skips this), then runs ruff (lint and
# format check, configured in pyproject.toml), mypy, the documentation site's
# strict build (mkdocs.yml) and pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/unit -x`.
# pytest runs the test modules in LOCKGATE_TEST_WORKERS parallel processes (default 3,
# pytest-xdist; each module stays in one process); LOCKGATE_TEST_WORKERS=0 runs them all
# in this one process, e.g. for --pdb.
# `bash scripts/test.sh --fast`: the fast tier for the edit-test loop: ruff, mypy and the
# unit tests without Spark (tests/unit -m "not spark"); no service is started or needed;
# about two minutes on 2 cores. Extra arguments after --fast go to pytest as well.
# Exits non-zero if ruff finds anything, or mypy or pytest fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_common.sh

fast=0
if [ "${1:-}" = "--fast" ]; then
    fast=1
    shift
fi

ensure_venv test,docs

if [ "$fast" = 1 ]; then
    say "the fast tier: no services (unit tests need none)"
elif [ "${LOCKGATE_SKIP_SERVICES:-0}" = 1 ]; then
    say "skipping services (LOCKGATE_SKIP_SERVICES=1)"
elif ! bash scripts/services.sh; then
    warn "some services are not running (see above); tests that need them will fail"
fi
if [ "$fast" = 0 ]; then
    bash scripts/browser.sh || warn "chromium/chromedriver missing (see above); the dashboard's browser test will fail"
fi

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
# the documentation site: a broken link or anchor, a page missing from the nav or a
# docstring the API reference cannot render fails it (built into a temporary folder)
say "mkdocs build --strict"
site="$(mktemp -d)"
# (NO_MKDOCS_2_WARNING: Material prints an end-of-life banner on every build otherwise)
if ! NO_MKDOCS_2_WARNING=1 "$VENV/bin/python" -m mkdocs build --strict --quiet --site-dir "$site"; then
    warn "the documentation site does not build: fix the pages named above (mkdocs.yml lists them)"
    status=1
fi
rm -rf "$site"
# the suite mostly waits (checkpoint intervals, Spark's JVMs, brokers): three processes
# finish it in about half the time of one, even on two cores. Whole modules go to a worker
# (their module fixtures start clusters and builds once), the slowest first (SLOW_MODULES
# in tests/conftest.py); arguments given here come after these, so `-n 0` wins too.
workers="${LOCKGATE_TEST_WORKERS:-3}"
[[ "$workers" =~ ^[0-9]+$ ]] || die "LOCKGATE_TEST_WORKERS must be a number of processes (0: no workers), not '$workers'"
parallel=()
if [ "$workers" -gt 0 ]; then
    parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
if [ "$fast" = 1 ]; then
    set -- tests/unit -m "not spark" "$@"
fi
say "pytest -q ${parallel[*]} $*"
# a test the hang guard kills takes its process down with it: its traceback goes here
# (one file per worker: <this path>.gw0, .gw1...)
export LOCKGATE_HANG_DUMP="${TMPDIR:-/tmp}/lockgate-hang-$$.txt"
rm -f "$LOCKGATE_HANG_DUMP" "$LOCKGATE_HANG_DUMP".*
"$VENV/bin/python" -m pytest -q "${parallel[@]}" "$@" || status=1
for dump in "$LOCKGATE_HANG_DUMP" "$LOCKGATE_HANG_DUMP".*; do
    if [ -s "$dump" ] && grep -q "Thread 0x\|Current thread" "$dump"; then
        warn "the hang guard stopped a test run:"
        cat "$dump" >&2
    fi
done
rm -f "$LOCKGATE_HANG_DUMP" "$LOCKGATE_HANG_DUMP".*

if [ "$status" -ne 0 ]; then
    say "FAILED (see above)"
else
    say "all checks passed"
fi
exit "$status"
