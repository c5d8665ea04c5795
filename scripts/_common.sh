# Shared helpers of the scripts in this folder; source it, do not run it.
# Every script cds to the repository root first, so paths here are relative to it.

say() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The interpreter that creates .venv: $PYTHON, or python3 (3.10 or newer).
PYTHON="${PYTHON:-python3}"
VENV=".venv"

# ensure_venv [EXTRAS]: create .venv if needed and pip install -e ".[EXTRAS]" into it,
# unless the same pyproject.toml was already installed with the same extras (a stamp file
# in .venv records the pyproject hash). Set LOCKGATE_REINSTALL=1 to force the install.
ensure_venv() {
    local extras="${1:-}"
    if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.10+ (or set PYTHON=/path/to/python3)"
        "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
            || die "lockgate needs Python 3.10+, $PYTHON is $("$PYTHON" -V 2>&1)"
        say "creating $VENV with $("$PYTHON" -V 2>&1)"
        "$PYTHON" -m venv --clear "$VENV" \
            || die "'$PYTHON -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"
    fi
    local target="." name="base"
    if [ -n "$extras" ]; then target=".[$extras]"; name="$extras"; fi
    local stamp="$VENV/.lockgate-installed-$name"
    local want
    want="$("$VENV/bin/python" -c 'import hashlib, sys; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
    if [ "${LOCKGATE_REINSTALL:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    say "installing lockgate ($target) into $VENV"
    rm -f "$stamp"
    # The build backend's warnings would bury the output: keep the log, show it on failure.
    local log="$VENV/pip-install.log"
    if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$target" \
            >"$log" 2>&1; then
        cat "$log" >&2
        die "pip install -e '$target' failed (log: $log)"
    fi
    printf '%s\n' "$want" > "$stamp"
}
