#!/usr/bin/env bash
# Run the word-count example: creates .venv if missing, installs lockgate into it (once),
# then runs `lockgate run examples/wordcount.py`. Extra arguments go to the example
# (try --help).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_common.sh

ensure_venv
say "lockgate run examples/wordcount.py $*"
exec "$VENV/bin/lockgate" run examples/wordcount.py "$@"
