#!/usr/bin/env bash
# Fetch the Debezium peer of bench/cdc.py from Maven Central and compile its harness:
# debezium-embedded and debezium-connector-postgres under debezium-bom (pom.xml beside this
# file) with their dependencies, copied into a cache outside the repository
# ($LOCKGATE_CACHE_DIR, default ~/.cache/lockgate, folder bench-cdc-debezium/lib), and
# Harness.java compiled into bench-cdc-debezium/classes. Kept when the pom and the harness
# are unchanged (a stamp file holds their hash). Needs Java 17 (java, javac) and mvn.
# Prints the folder. Usage: bash bench/cdc_debezium/fetch.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${LOCKGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lockgate}/bench-cdc-debezium"
for tool in java javac mvn; do
    command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool not found (Java 17 and Maven are needed)" >&2; exit 1; }
done
want="$(cat "$here/pom.xml" "$here/Harness.java" | sha256sum | cut -d' ' -f1)"
if [ -f "$cache/.stamp" ] && [ "$(cat "$cache/.stamp")" = "$want" ] && [ -f "$cache/classes/Harness.class" ]; then
    echo "$cache"
    exit 0
fi
rm -rf "$cache/lib" "$cache/classes" "$cache/.stamp"
mkdir -p "$cache/lib" "$cache/classes"
if ! mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$cache/lib" >"$cache/mvn.log" 2>&1; then
    cat "$cache/mvn.log" >&2
    echo "error: fetching Debezium from Maven Central failed (log: $cache/mvn.log)" >&2
    exit 1
fi
javac -d "$cache/classes" -cp "$cache/lib/*" "$here/Harness.java" >&2
printf '%s\n' "$want" > "$cache/.stamp"
echo "$cache"
