#!/usr/bin/env bash
# Install (when missing) and start the services the connector tests use, on 127.0.0.1:
# PostgreSQL (5432, with max_prepared_transactions > 0 for PostgresSink's exactly-once
# mode; a second cluster on 5433 with wal_level=logical for PostgresCdcSource), Redis (6379), NATS with JetStream (4222) and Apache Kafka 4.x in KRaft mode (one
# broker that is its own controller, 9092; configuration in scripts/kafka/) and Apicurio
# Registry 3.0.9 (a schema registry with the Confluent-compatible REST API at
# http://127.0.0.1:8081/apis/ccompat/v7, in-memory storage, global compatibility BACKWARD
# as Confluent's default).
#
# Missing programs are installed with apt-get (Debian's packages: postgresql,
# redis-server, nats-server, maven); that needs root, or sudo without a password. Kafka's
# jars come from Maven Central (scripts/kafka/pom.xml), copied once into a cache folder
# ($LOCKGATE_CACHE_DIR, default ~/.cache/lockgate) and reused, as is Apicurio's distribution
# (io.apicurio:apicurio-registry-app:3.0.9:tar.gz:all, ~109 MB, unpacked there); both need
# Java 17+. A service that
# already answers is left alone; one that does not is started and waited for (bounded
# polling, 30 s at most). Idempotent: when everything runs it only checks, in well under
# a second.
#
# Environment: LOCKGATE_NO_INSTALL=1 never installs (a missing service is then an error).
# Exit status: 0 when every service answers, 1 otherwise (the message says which and why).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_common.sh

failed=0
fail() { warn "$*"; failed=1; }

# wait_until DESCRIPTION COMMAND...: poll COMMAND every 0.25 s for up to 30 s.
wait_until() {
    local what="$1"; shift
    for _ in $(seq 1 120); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.25
    done
    fail "$what did not answer within 30 s"
    return 1
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
    else return 1
    fi
}

# apt_install PACKAGE...: install Debian packages (the package lists are refreshed once).
apt_updated=0
apt_install() {
    if [ "${LOCKGATE_NO_INSTALL:-0}" = 1 ]; then
        fail "not installing $* (LOCKGATE_NO_INSTALL=1); install them yourself"
        return 1
    fi
    if ! command -v apt-get >/dev/null; then
        fail "cannot install $*: apt-get not found (install them with your package manager)"
        return 1
    fi
    if ! as_root true; then
        fail "cannot install $*: needs root or password-less sudo (or install them yourself)"
        return 1
    fi
    say "installing $* (apt-get)"
    local log="${TMPDIR:-/tmp}/lockgate-apt-$$.log"
    if [ "$apt_updated" = 0 ]; then
        as_root apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; fail "apt-get update failed"; return 1; }
        apt_updated=1
    fi
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1; then
        cat "$log" >&2
        fail "apt-get install $* failed"
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}

postgres_up() { pg_isready -h 127.0.0.1 -p 5432 -q; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]; }
nats_info() {
    timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222; IFS= read -r line <&3; printf %s "$line"' 2>/dev/null
}
nats_up() { [[ "$(nats_info)" == INFO* ]]; }
nats_has_jetstream() { [[ "$(nats_info)" == *'"jetstream":true'* ]]; }

# --- PostgreSQL ------------------------------------------------------------------------
pg_version() { ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1; }
if ! command -v pg_ctlcluster >/dev/null || [ -z "$(pg_version)" ] \
        || [ ! -x "/usr/lib/postgresql/$(pg_version)/bin/postgres" ]; then
    apt_install postgresql postgresql-client
fi
pg_setting() { psql -h 127.0.0.1 -U postgres -d postgres -Atc "SHOW $1" 2>/dev/null; }
if [ -n "$(pg_version)" ] && command -v pg_ctlcluster >/dev/null; then
    ver="$(pg_version)"
    if [ ! -d "/etc/postgresql/$ver/main" ]; then
        say "creating the PostgreSQL $ver cluster 'main'"
        as_root pg_createcluster "$ver" main >/dev/null || fail "pg_createcluster $ver main failed"
    fi
    conf="/etc/postgresql/$ver/main"
    if [ -d "$conf" ]; then
        # tests connect as postgres over TCP on loopback without a password (trust on
        # 127.0.0.1 only), and the sink's exactly-once mode needs prepared transactions
        hba="$conf/pg_hba.conf"
        if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba" 2>/dev/null; then
            say "PostgreSQL: trusting loopback connections (127.0.0.1, ::1)"
            as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
            restart_pg=1
        fi
        if ! grep -q "^max_prepared_transactions = 64" "$conf/postgresql.conf" 2>/dev/null; then
            say "PostgreSQL: max_prepared_transactions = 64"
            printf '\n# lockgate tests (scripts/services.sh)\nmax_prepared_transactions = 64\nlisten_addresses = '"'"'127.0.0.1'"'"'\n' \
                | as_root tee -a "$conf/postgresql.conf" >/dev/null
            restart_pg=1
        fi
        if postgres_up && [ "${restart_pg:-0}" = 1 ]; then
            as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main restart || fail "restarting PostgreSQL failed"
        elif ! postgres_up; then
            say "starting PostgreSQL $ver"
            as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start \
                || fail "pg_ctlcluster $ver main start failed (log: /var/log/postgresql/)"
        fi
        if wait_until "PostgreSQL" postgres_up; then
            mpt="$(pg_setting max_prepared_transactions)"
            if [ -z "$mpt" ] || [ "$mpt" = 0 ]; then
                fail "PostgreSQL answers but max_prepared_transactions is '${mpt:-unknown}' (want > 0) or user postgres cannot log in over 127.0.0.1"
            else
                say "PostgreSQL is running (max_prepared_transactions = $mpt)"
            fi
            # the connector tests' database (LOCKGATE_TEST_PG_DSN defaults to .../test)
            if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -Atc \
                    "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null)" != 1 ]; then
                say "PostgreSQL: creating database 'test'"
                psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test" \
                    || fail "cannot create the database 'test'"
            fi
        fi
    fi
fi

# --- PostgreSQL with wal_level=logical (5433, for PostgresCdcSource) -------------------
# A second cluster of the same version, 'cdc' on 127.0.0.1:5433, with logical decoding
# (wal_level = logical, replication slots and WAL senders for the CDC tests), trust on
# loopback (replication connections too), database 'test'. Its own cluster, so the 5432
# one is never restarted or reconfigured for it.
postgres_cdc_up() { pg_isready -h 127.0.0.1 -p 5433 -q; }
pg_cdc_setting() { psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -Atc "SHOW $1" 2>/dev/null; }
if [ -n "$(pg_version)" ] && command -v pg_ctlcluster >/dev/null; then
    ver="$(pg_version)"
    cdc_conf="/etc/postgresql/$ver/cdc"
    if [ ! -d "$cdc_conf" ]; then
        say "creating the PostgreSQL $ver cluster 'cdc' (127.0.0.1:5433, wal_level = logical)"
        as_root pg_createcluster "$ver" cdc --port 5433 >/dev/null || fail "pg_createcluster $ver cdc --port 5433 failed"
    fi
    if [ -d "$cdc_conf" ]; then
        restart_cdc=0
        cdc_hba="$cdc_conf/pg_hba.conf"
        if ! grep -q '^host replication all 127.0.0.1/32 trust' "$cdc_hba" 2>/dev/null; then
            say "PostgreSQL cdc: trusting loopback connections (127.0.0.1, ::1), replication too"
            as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nhost replication all 127.0.0.1/32 trust\nhost replication all ::1/128 trust' "$cdc_hba"
            restart_cdc=1
        fi
        if ! grep -q "^wal_level = logical" "$cdc_conf/postgresql.conf" 2>/dev/null; then
            say "PostgreSQL cdc: wal_level = logical"
            printf '\n# lockgate CDC tests (scripts/services.sh)\nwal_level = logical\nmax_replication_slots = 32\nmax_wal_senders = 32\nmax_prepared_transactions = 64\nlisten_addresses = '"'"'127.0.0.1'"'"'\nport = 5433\n' \
                | as_root tee -a "$cdc_conf/postgresql.conf" >/dev/null
            restart_cdc=1
        fi
        if postgres_cdc_up && [ "$restart_cdc" = 1 ]; then
            as_root pg_ctlcluster --skip-systemctl-redirect "$ver" cdc restart || fail "restarting PostgreSQL cdc failed"
        elif ! postgres_cdc_up; then
            say "starting PostgreSQL $ver cdc (5433)"
            as_root pg_ctlcluster --skip-systemctl-redirect "$ver" cdc start \
                || fail "pg_ctlcluster $ver cdc start failed (log: /var/log/postgresql/postgresql-$ver-cdc.log)"
        fi
        if wait_until "PostgreSQL cdc (5433)" postgres_cdc_up; then
            wal_level="$(pg_cdc_setting wal_level)"
            if [ "$wal_level" != logical ]; then
                fail "PostgreSQL on 5433 answers but wal_level is '${wal_level:-unknown}' (want logical) or user postgres cannot log in over 127.0.0.1"
            else
                say "PostgreSQL cdc is running (5433, wal_level = logical)"
            fi
            if [ "$(psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -Atc \
                    "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null)" != 1 ]; then
                say "PostgreSQL cdc: creating database 'test'"
                psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -qc "CREATE DATABASE test" \
                    || fail "cannot create the database 'test' on 5433"
            fi
        fi
    fi
fi

# --- Redis -----------------------------------------------------------------------------
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    apt_install redis-server redis-tools
fi
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    if redis_up; then
        say "Redis is running"
    else
        say "starting Redis"
        mkdir -p /tmp/lockgate-redis
        redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --protected-mode yes \
            --save "" --appendonly no --dir /tmp/lockgate-redis \
            --logfile /tmp/lockgate-redis/redis.log || fail "redis-server failed to start (log: /tmp/lockgate-redis/redis.log)"
        wait_until "Redis" redis_up && say "Redis is running"
    fi
fi

# --- NATS with JetStream ---------------------------------------------------------------
nats_bin="$(command -v nats-server || echo /usr/sbin/nats-server)"
if [ ! -x "$nats_bin" ]; then
    apt_install nats-server
    nats_bin="$(command -v nats-server || echo /usr/sbin/nats-server)"
fi
if [ -x "$nats_bin" ]; then
    if nats_up; then
        say "NATS is running"
    else
        say "starting NATS (JetStream)"
        mkdir -p /tmp/lockgate-nats
        # setsid + nohup: the server outlives this script and the test run's process group
        setsid nohup "$nats_bin" -a 127.0.0.1 -p 4222 -js -sd /tmp/lockgate-nats/store \
            -l /tmp/lockgate-nats/nats.log </dev/null >/dev/null 2>&1 &
        wait_until "NATS" nats_up && say "NATS is running"
    fi
    if nats_up && ! nats_has_jetstream; then
        fail "the NATS server on 127.0.0.1:4222 does not have JetStream enabled (restart it with -js)"
    fi
fi

# --- Apache Kafka (KRaft) --------------------------------------------------------------
# kafka_up: the broker answers an ApiVersions request (not just a TCP connect)
kafka_up() {
    timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/9092
        printf "\x00\x00\x00\x0c\x00\x12\x00\x00\x00\x00\x00\x01\x00\x02lg" >&3
        head -c 10 <&3 | od -An -tx1 | tr -d " \n"' 2>/dev/null | grep -q '^........000000010000$'
}
kafka_dir="/tmp/lockgate-kafka"
if kafka_up; then
    say "Kafka is running"
elif ! command -v java >/dev/null; then
    fail "Kafka needs Java 17 or newer on PATH (java not found)"
else
    cache="${LOCKGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lockgate}"
    pom_hash="$(sha256sum scripts/kafka/pom.xml | cut -c1-12)"
    libs="$cache/kafka-$pom_hash/libs"
    if [ ! -f "$libs/.complete" ]; then
        command -v mvn >/dev/null || apt_install maven
        if command -v mvn >/dev/null; then
            say "fetching Kafka's jars from Maven Central into $libs (once)"
            mkdir -p "$libs"
            log="$cache/kafka-$pom_hash/mvn.log"
            if mvn -q -B -f scripts/kafka/pom.xml dependency:copy-dependencies \
                    -DincludeScope=runtime -DoutputDirectory="$libs" >"$log" 2>&1; then
                touch "$libs/.complete"
            else
                cat "$log" >&2
                fail "Maven could not fetch Kafka's jars (log: $log)"
            fi
        fi
    fi
    if [ -f "$libs/.complete" ]; then
        mkdir -p "$kafka_dir"
        chmod 700 "$kafka_dir"
        kafka_java=(java -Xms256m -Xmx768m -Dkafka.logs.dir="$kafka_dir"
            -Dlog4j2.configurationFile="$PWD/scripts/kafka/log4j2.properties" -cp "$libs/*")
        # the committed configuration plus this machine's data folder
        { cat scripts/kafka/server.properties; printf 'log.dirs=%s\n' "$kafka_dir/data"; } \
            >"$kafka_dir/server.properties"
        if [ ! -f "$kafka_dir/data/meta.properties" ]; then
            say "formatting Kafka's storage in $kafka_dir/data"
            rm -rf "$kafka_dir/data"
            cluster_id="$("${kafka_java[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
            "${kafka_java[@]}" kafka.tools.StorageTool format -t "$cluster_id" \
                -c "$kafka_dir/server.properties" >"$kafka_dir/format.log" 2>&1 \
                || { cat "$kafka_dir/format.log" >&2; fail "kafka-storage format failed"; }
        fi
        say "starting Kafka (KRaft, 127.0.0.1:9092)"
        # setsid + nohup: the broker outlives this script and the test run's process group
        setsid nohup "${kafka_java[@]}" kafka.Kafka "$kafka_dir/server.properties" </dev/null >"$kafka_dir/kafka.out" 2>&1 &
        for _ in $(seq 1 240); do kafka_up && break; sleep 0.25; done
        if kafka_up; then say "Kafka is running"
        else fail "Kafka did not answer within 60 s (logs: $kafka_dir/kafka.out, $kafka_dir/server.log)"
        fi
    fi
fi

# --- Apicurio Registry (Confluent-compatible schema registry API) -----------------------
# One JVM on 127.0.0.1:8081 (HTTP and Quarkus' management interface both bound to
# loopback), storage in memory: its schemas and ids are gone when it stops. Its
# Confluent-compatible API is /apis/ccompat/v7. Two settings make it behave as Confluent's
# registry does by default: the global compatibility rule BACKWARD, both as the default
# rule (apicurio.rules.global.compatibility, enforced from the first request) and stored
# through PUT /config (without it GET /config and GET /config/{subject}?defaultToGlobal=true
# answer NONE although BACKWARD is enforced).
registry_version="3.0.9"
registry_api="/apis/ccompat/v7"
registry_dir="/tmp/lockgate-apicurio"
# registry_request METHOD PATH [JSON]: one HTTP/1.0 request to 127.0.0.1:8081 (bash's
# /dev/tcp, as the Kafka and NATS probes: no curl needed); prints the whole response
registry_request() {
    timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/8081 || exit 1
        printf "%s %s HTTP/1.0\r\nHost: 127.0.0.1:8081\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" \
            "$1" "$2" "${#3}" "$3" >&3
        cat <&3' _ "$1" "$2" "${3:-}" 2>/dev/null
}
# registry_up: GET .../subjects answers 200 with a JSON array
registry_up() {
    local answer
    answer="$(registry_request GET "$registry_api/subjects")" || return 1
    [[ "$answer" == "HTTP/1."?" 200"* ]] && [[ "$answer" == *$'\r\n\r\n['* ]]
}
registry_backward() {
    [[ "$(registry_request GET "$registry_api/config")" == *'"compatibilityLevel":"BACKWARD"'* ]]
}
# java_major: the major version of the java on PATH (17 for "17.0.15", 1 for "1.8.0")
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
registry_started=0
if registry_up; then
    say "Apicurio Registry is running"
elif ! command -v java >/dev/null || [ "$(java_major)" -lt 17 ] 2>/dev/null; then
    fail "Apicurio Registry $registry_version needs Java 17 or newer on PATH (found: $(java -version 2>&1 | head -1))"
else
    cache="${LOCKGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lockgate}"
    home="$cache/apicurio-registry-$registry_version"
    runner="$home/apicurio-registry-app-$registry_version-runner.jar"
    if [ ! -f "$home/.complete" ]; then
        command -v mvn >/dev/null || apt_install maven
        if command -v mvn >/dev/null; then
            say "fetching Apicurio Registry $registry_version from Maven Central into $home (once, ~109 MB)"
            rm -rf "$home"
            mkdir -p "$home"
            log="$home/mvn.log"
            tarball="$home/apicurio-registry-app-$registry_version-all.tar.gz"
            if mvn -q -B dependency:copy \
                    -Dartifact="io.apicurio:apicurio-registry-app:$registry_version:tar.gz:all" \
                    -DoutputDirectory="$home" >"$log" 2>&1 \
                    && tar -xzf "$tarball" -C "$home" --no-same-owner && [ -f "$runner" ]; then
                rm -f "$tarball"
                touch "$home/.complete"
            else
                cat "$log" >&2
                fail "could not fetch or unpack Apicurio Registry $registry_version (log: $log)"
            fi
        fi
    fi
    if [ -f "$home/.complete" ]; then
        mkdir -p "$registry_dir"
        chmod 700 "$registry_dir"
        say "starting Apicurio Registry $registry_version (127.0.0.1:8081, in-memory storage)"
        # setsid + nohup: the registry outlives this script and the test run's process group;
        # its working folder is private (it writes nothing else but this log)
        (cd "$registry_dir" && umask 077 && setsid nohup java -Xms64m -Xmx384m \
            -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port=8081 \
            -Dquarkus.management.host=127.0.0.1 \
            -Dapicurio.rules.global.compatibility=BACKWARD \
            -jar "$runner" </dev/null >"$registry_dir/apicurio.out" 2>&1 &)
        for _ in $(seq 1 360); do registry_up && break; sleep 0.25; done
        if registry_up; then
            say "Apicurio Registry is running"
            registry_started=1
        else
            fail "Apicurio Registry did not answer GET http://127.0.0.1:8081$registry_api/subjects within 90 s (log: $registry_dir/apicurio.out; is port 8081 taken?)"
        fi
    fi
fi
if registry_up && ! registry_backward; then
    [ "$registry_started" = 1 ] || say "Apicurio Registry: the global compatibility was not BACKWARD"
    if [[ "$(registry_request PUT "$registry_api/config" '{"compatibility":"BACKWARD"}')" == "HTTP/1."?" 200"* ]] \
            && registry_backward; then
        say "Apicurio Registry: global compatibility BACKWARD"
    else
        fail "cannot set Apicurio Registry's global compatibility to BACKWARD (PUT http://127.0.0.1:8081$registry_api/config)"
    fi
fi

exit "$failed"
