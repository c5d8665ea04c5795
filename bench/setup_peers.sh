#!/usr/bin/env bash
# Create the peers' virtual environments for the Nexmark suite (bench/nexmark/), one per
# system, under bench/.peers/<name>, each with its pinned packages from PyPI. A venv whose
# stamp file already names the same packages is kept. Java 17 must be on PATH (Flink and
# Spark run on it). Usage: bash bench/setup_peers.sh [flink] [spark] [bytewax]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_common.sh

# pandas and protobuf in spark's: transformWithStateInPandas (bench/latency_spark.py) needs both
declare -A PACKAGES=(
    [flink]="apache-flink==2.3.0"
    [spark]="pyspark==4.3.0 pyarrow==26.0.1 pandas==2.3.3 protobuf==7.36.2"
    [bytewax]="bytewax==0.21.1 pyarrow==26.0.1"
)

setup_peer() {
    local name="$1" venv="bench/.peers/$1" want="${PACKAGES[$1]}"
    local stamp="$venv/.nexmark-packages"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$venv/bin/python" -c 'import sys'; then
        return 0
    fi
    say "creating $venv with $want"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv" || die "'$PYTHON -m venv $venv' failed"
    # shellcheck disable=SC2086 - the package list is split on purpose
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want \
            >"$venv.pip.log" 2>&1; then
        cat "$venv.pip.log" >&2
        die "installing $want into $venv failed (log: $venv.pip.log)"
    fi
    printf '%s\n' "$want" > "$stamp"
}

command -v java >/dev/null 2>&1 || die "java not found: Flink and Spark need Java 17 on PATH"
peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=(flink spark bytewax)
for peer in "${peers[@]}"; do
    [ -n "${PACKAGES[$peer]+x}" ] || die "unknown peer '$peer': one of ${!PACKAGES[*]}"
    setup_peer "$peer"
done
