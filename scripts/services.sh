#!/usr/bin/env bash
# Make sure the services the connector tests use are running on 127.0.0.1:
# PostgreSQL (5432), Redis (6379) and NATS with JetStream (4222). A service that already
# answers is left alone; one that does not is started. PostgreSQL must allow prepared
# transactions (PostgresSink's exactly-once mode): when max_prepared_transactions is 0,
# it is set to 64 (ALTER SYSTEM) and the server restarted. A service whose programs are not
# installed gets a warning and is skipped (no test needs it yet).
# Exit status: 0 when every installed service answers, 1 when one failed to start.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_common.sh

failed=0

# wait_until DESCRIPTION COMMAND...: retry COMMAND for up to 15 s.
wait_until() {
    local what="$1"; shift
    for _ in $(seq 1 30); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    warn "$what did not come up within 15 s"
    failed=1
    return 1
}

postgres_up() { pg_isready -h 127.0.0.1 -q; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 ping 2>/dev/null)" = PONG ]; }
nats_up() { timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222' 2>/dev/null; }
nats_has_jetstream() {
    local info
    info="$(timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222; IFS= read -r line <&3; printf %s "$line"' 2>/dev/null)"
    [[ "$info" == *'"jetstream":true'* ]]
}

# PostgreSQL
if ! command -v pg_isready >/dev/null || ! command -v pg_ctlcluster >/dev/null \
        || [ ! -d /etc/postgresql ]; then
    warn "PostgreSQL is not installed (pg_isready/pg_ctlcluster/etc/postgresql missing); skipped"
elif postgres_up; then
    say "PostgreSQL is running"
else
    say "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start || true
    wait_until "PostgreSQL" postgres_up && say "PostgreSQL is running"
fi
pg_setting() {
    psql -h 127.0.0.1 -U postgres -d postgres -Atc "SHOW $1" 2>/dev/null
}
if command -v psql >/dev/null && postgres_up && [ "$(pg_setting max_prepared_transactions)" = 0 ]; then
    say "PostgreSQL: max_prepared_transactions = 64 (was 0), restarting"
    psql -h 127.0.0.1 -U postgres -d postgres -qc "ALTER SYSTEM SET max_prepared_transactions = 64" \
        && pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart || true
    wait_until "PostgreSQL" postgres_up
    if [ "$(pg_setting max_prepared_transactions)" = 0 ]; then
        warn "PostgreSQL still has max_prepared_transactions = 0"
        failed=1
    fi
fi

# Redis
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    warn "Redis is not installed (redis-server/redis-cli missing); skipped"
elif redis_up; then
    say "Redis is running"
else
    say "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
    wait_until "Redis" redis_up && say "Redis is running"
fi

# NATS JetStream
if [ ! -x /usr/sbin/nats-server ] || ! command -v start-stop-daemon >/dev/null; then
    warn "NATS is not installed (/usr/sbin/nats-server or start-stop-daemon missing); skipped"
else
    if nats_up; then
        say "NATS is running"
    else
        say "starting NATS (JetStream)"
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
        wait_until "NATS" nats_up && say "NATS is running"
    fi
    if nats_up && ! nats_has_jetstream; then
        warn "the NATS server on 127.0.0.1:4222 does not report JetStream enabled"
    fi
fi

exit "$failed"
