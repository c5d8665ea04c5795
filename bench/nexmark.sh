#!/usr/bin/env bash
# The Nexmark-style suite from one command: sets up lockgate's .venv and the peers'
# venvs (bench/setup_peers.sh), generates the data, runs every query on lockgate (Spark
# and local executors), Flink SQL, Spark Structured Streaming and Bytewax, checks the
# results and writes out/nexmark/report.md. Arguments go to bench/nexmark/run.py
# (--events N, --queries q0,q5, --systems flink,lockgate-spark, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_common.sh
ensure_venv
bash bench/setup_peers.sh
exec "$VENV/bin/python" bench/nexmark/run.py "$@"
