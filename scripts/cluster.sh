#!/usr/bin/env bash
# A multi-host Spark standalone cluster on this one machine, in network namespaces:
#
#   scripts/cluster.sh up        create it (idempotent: a cluster that is up is left alone)
#   scripts/cluster.sh down      end every process in its namespaces, delete what it made
#   scripts/cluster.sh status    namespaces, addresses, processes and the master's workers
#   scripts/cluster.sh install   only install what it needs (iproute2), when missing
#
# Each "host" is a network namespace (lg-master, lg-w1, lg-w2, lg-w3, lg-driver) with one
# address of 10.213.37.0/24 on a veth pair whose other end is on the bridge lg-br in the root
# namespace (10.213.37.1; master .10, workers .11-.13, driver .20); loopback is up in each.
# The master and one 1-core worker per worker namespace run from the installed pyspark's
# spark-class (the .venv's), bound to their namespace's address (--host, SPARK_LOCAL_IP),
# so traffic between them crosses the bridge, never 127.0.0.1. Run a driver with
#
#   ip netns exec lg-driver env SPARK_LOCAL_IP=10.213.37.20 \
#       LOCKGATE_SPARK_MASTER=spark://10.213.37.10:7077 .venv/bin/lockgate run JOB.py
#
# Needs root (network namespaces) and Java 17+; iproute2 is installed with apt-get when
# missing. Logs and work folders: $LOCKGATE_CLUSTER_DIR (default /tmp/lockgate-cluster,
# mode 0700). Waits are bounded (60 s for the workers, 15 s for processes to end) and end
# with a message saying what did not happen. `down` also ends any process someone started
# inside the namespaces (a driver in lg-driver), since the namespaces are deleted.
# Environment: LOCKGATE_NO_INSTALL=1 never installs; LOCKGATE_CLUSTER_SUBNET (default
# 10.213.37) moves the /24.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_common.sh

SUBNET="${LOCKGATE_CLUSTER_SUBNET:-10.213.37}"
STATE="${LOCKGATE_CLUSTER_DIR:-/tmp/lockgate-cluster}"
BRIDGE=lg-br
MASTER_NS=lg-master
WORKER_NS=(lg-w1 lg-w2 lg-w3)
DRIVER_NS=lg-driver
ALL_NS=("$MASTER_NS" "${WORKER_NS[@]}" "$DRIVER_NS")
MASTER_ADDR="$SUBNET.10"
DRIVER_ADDR="$SUBNET.20"
MASTER_URL="spark://$MASTER_ADDR:7077"
STATUS_URL="http://$MASTER_ADDR:8080/json/"
PY="$VENV/bin/python"

address_of() {
    case "$1" in
        "$MASTER_NS") echo "$MASTER_ADDR" ;;
        "$DRIVER_NS") echo "$DRIVER_ADDR" ;;
        lg-w*) echo "$SUBNET.$((10 + ${1#lg-w}))" ;;
    esac
}
host_veth() { echo "lgh-${1#lg-}"; }
peer_veth() { echo "lgn-${1#lg-}"; }

need_root() {
    [ "$(id -u)" = 0 ] || die "network namespaces need root: run 'sudo scripts/cluster.sh $1'"
}

install_deps() {
    command -v ip >/dev/null && return 0
    [ "${LOCKGATE_NO_INSTALL:-0}" = 1 ] \
        && die "the 'ip' command is missing and LOCKGATE_NO_INSTALL=1: install iproute2 yourself"
    command -v apt-get >/dev/null \
        || die "the 'ip' command is missing and apt-get is not here: install iproute2 with your package manager"
    say "installing iproute2 (apt-get)"
    local log="${TMPDIR:-/tmp}/lockgate-apt-cluster-$$.log"
    if ! apt-get update -qq >"$log" 2>&1 \
        || ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            iproute2 >>"$log" 2>&1; then
        cat "$log" >&2; rm -f "$log"; die "apt-get install iproute2 failed"
    fi
    rm -f "$log"
    command -v ip >/dev/null || die "'ip' is still missing after installing iproute2"
}

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }
ns_pids() { ns_exists "$1" && ip netns pids "$1" 2>/dev/null; }
all_pids() { for ns in "${ALL_NS[@]}"; do ns_pids "$ns"; done; }

# workers_alive: how many workers the master lists ALIVE (0 when it does not answer)
workers_alive() {
    "$PY" - "$STATUS_URL" 2>/dev/null <<'EOF' || echo 0
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
    print(sum(w.get("state") == "ALIVE" for w in json.loads(r.read()).get("workers", [])))
EOF
}

kill_all() {
    local sig pids
    for sig in TERM KILL; do
        pids="$(all_pids)"
        [ -z "$pids" ] && return 0
        # shellcheck disable=SC2086 - one pid per word
        kill -"$sig" $pids 2>/dev/null
        for _ in $(seq 1 60); do
            [ -z "$(all_pids)" ] && return 0
            sleep 0.25
        done
    done
    pids="$(all_pids)"
    [ -z "$pids" ] || die "processes in the cluster's namespaces did not end after SIGKILL: $pids"
}

down() {
    need_root down
    command -v ip >/dev/null || return 0
    kill_all
    local ns
    for ns in "${ALL_NS[@]}"; do
        ns_exists "$ns" && ip netns del "$ns"
        ip link del "$(host_veth "$ns")" 2>/dev/null
    done
    ip link del "$BRIDGE" 2>/dev/null
    rm -f "$STATE"/*.pid
    say "cluster down (namespaces, veths and bridge $BRIDGE deleted)"
}

# step COMMAND...: run it; on failure say which command failed (make_network stops there)
step() { "$@" || { warn "'$*' failed"; return 1; }; }

make_network() {
    step ip link add "$BRIDGE" type bridge || return 1
    step ip addr add "$SUBNET.1/24" dev "$BRIDGE" || return 1
    step ip link set "$BRIDGE" up || return 1
    local ns host peer
    for ns in "${ALL_NS[@]}"; do
        host="$(host_veth "$ns")"; peer="$(peer_veth "$ns")"
        step ip netns add "$ns" \
            && step ip link add "$host" type veth peer name "$peer" \
            && step ip link set "$peer" netns "$ns" \
            && step ip link set "$host" master "$BRIDGE" \
            && step ip link set "$host" up \
            && step ip -n "$ns" link set lo up \
            && step ip -n "$ns" addr add "$(address_of "$ns")/24" dev "$peer" \
            && step ip -n "$ns" link set "$peer" up \
            && step ip -n "$ns" route add default via "$SUBNET.1" \
            || return 1
    done
}

# spawn NAMESPACE NAME ARGS...: spark-class ARGS in NAMESPACE, in a session of its own
spawn() {
    local ns="$1" name="$2"; shift 2
    local addr; addr="$(address_of "$ns")"
    SPARK_HOME="$SPARK_HOME" SPARK_LOCAL_IP="$addr" SPARK_LOCAL_HOSTNAME="$addr" \
        SPARK_LOG_DIR="$STATE/logs" SPARK_WORKER_DIR="$STATE/work" PYSPARK_PYTHON="$PWD/$PY" \
        setsid ip netns exec "$ns" "$SPARK_HOME/bin/spark-class" "$@" \
        >"$STATE/$name.log" 2>&1 </dev/null &
    echo $! >"$STATE/$name.pid"
}

up() {
    need_root up
    install_deps
    [ -x "$PY" ] || die "$PY not found: run scripts/test.sh (or create .venv with lockgate[spark]) first"
    SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" \
        || die "pyspark is not installed in $VENV (pip install -e '.[spark]')"
    command -v java >/dev/null || [ -n "${JAVA_HOME:-}" ] \
        || die "Spark needs Java 17+: apt-get install openjdk-17-jre-headless"
    if ns_exists "$MASTER_NS" && [ "$(workers_alive)" -ge "${#WORKER_NS[@]}" ]; then
        say "cluster already up: master $MASTER_URL, ${#WORKER_NS[@]} workers ALIVE"
        return 0
    fi
    # a partial cluster (an earlier up that failed, a killed process): start over
    if ns_exists "$MASTER_NS" || ip link show "$BRIDGE" >/dev/null 2>&1; then down; fi
    mkdir -p "$STATE/logs" "$STATE/work" && chmod 0700 "$STATE" \
        || die "cannot create $STATE"
    make_network || { down; die "creating the namespaces failed (see above)"; }
    spawn "$MASTER_NS" master org.apache.spark.deploy.master.Master \
        --host "$MASTER_ADDR" --port 7077 --webui-port 8080
    local ns
    for ns in "${WORKER_NS[@]}"; do
        mkdir -p "$STATE/work/$ns"
        spawn "$ns" "worker-$ns" org.apache.spark.deploy.worker.Worker \
            --host "$(address_of "$ns")" --cores 1 --memory 1g \
            --work-dir "$STATE/work/$ns" "$MASTER_URL"
    done
    for _ in $(seq 1 240); do
        if [ "$(workers_alive)" -ge "${#WORKER_NS[@]}" ]; then
            say "cluster up: master $MASTER_URL (web UI http://$MASTER_ADDR:8080), workers" \
                "$SUBNET.11-13, driver namespace $DRIVER_NS ($DRIVER_ADDR); logs in $STATE"
            return 0
        fi
        sleep 0.25
    done
    warn "the master did not list ${#WORKER_NS[@]} ALIVE workers within 60 s; log tails:"
    tail -n 15 "$STATE"/*.log >&2
    down
    exit 1
}

status() {
    command -v ip >/dev/null || { echo "down (no 'ip' command)"; return 1; }
    local ns up=0
    for ns in "${ALL_NS[@]}"; do
        if ns_exists "$ns"; then
            up=1
            echo "$ns $(address_of "$ns") pids: $(ns_pids "$ns" | tr '\n' ' ')"
        fi
    done
    [ "$up" = 1 ] || { echo "down"; return 1; }
    echo "master $MASTER_URL: $(workers_alive) of ${#WORKER_NS[@]} workers ALIVE"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    install) need_root install; install_deps ;;
    *) die "usage: scripts/cluster.sh up|down|status|install" ;;
esac
