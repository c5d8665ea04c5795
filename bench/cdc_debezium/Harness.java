// The Debezium peer of bench/cdc.py: Debezium's embedded engine (debezium-embedded, the
// PostgreSQL connector, pgoutput) with a consumer that only counts records.
//
// Usage (bench/cdc.py runs it; bench/cdc_debezium/fetch.sh fetches the jars and compiles it):
//   java -cp CLASSES:LIB/* Harness PROPERTIES_FILE SNAPSHOT_ROWS STREAM_ROWS TIMEOUT_S
//
// PROPERTIES_FILE holds the engine's and connector's properties (bench/cdc.py writes them).
// The records are Kafka Connect SourceRecords (the engine's Connect format: no JSON or Avro
// serialisation), each counted by its envelope's "op": "r" is a snapshot read, "c"/"u"/"d"
// a streamed change (others, such as "m" for logical decoding messages that other sessions
// write into the WAL, are not counted). One JSON line on stdout per event, each with
// "t_us", the wall-clock time in microseconds since the epoch (the clock of Python's
// time.time()), and "cpu_s", the JVM's CPU seconds so far (all its threads):
//   {"event": "start", ...}          just before the engine runs
//   {"event": "snapshot_done", ...}  when the SNAPSHOT_ROWS-th "r" record is counted
//   {"event": "stream_first", ...}   when the first change is counted
//   {"event": "stream_done", ...}    when the STREAM_ROWS-th change is counted
//   {"event": "end", "snapshot": n, "stream": m, "ok": bool, "error": ...}  after close
// Exits 0 once both counts are reached (then the engine is closed), 1 on an engine failure
// or when TIMEOUT_S pass first.

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.FileReader;
import java.io.Reader;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.source.SourceRecord;

public final class Harness {
    private static volatile String error;

    private static final com.sun.management.OperatingSystemMXBean OS =
            (com.sun.management.OperatingSystemMXBean)
                    java.lang.management.ManagementFactory.getOperatingSystemMXBean();

    /** The time now and this JVM's CPU time so far (every thread), as JSON fields. */
    private static String stamp() {
        return "\"t_us\": " + nowUs() + ", \"cpu_s\": " + OS.getProcessCpuTime() / 1e9;
    }

    private static long nowUs() {
        return ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now());
    }

    private static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: Harness PROPERTIES_FILE SNAPSHOT_ROWS STREAM_ROWS TIMEOUT_S");
            System.exit(2);
        }
        Properties props = new Properties();
        try (Reader r = new FileReader(args[0])) {
            props.load(r);
        }
        final long snapshotRows = Long.parseLong(args[1]);
        final long streamRows = Long.parseLong(args[2]);
        final long timeoutS = Long.parseLong(args[3]);
        final CountDownLatch done = new CountDownLatch(1);
        final long[] counts = new long[2]; // snapshot, stream: touched by the engine's thread only

        DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> consumer =
                (records, committer) -> {
                    for (RecordChangeEvent<SourceRecord> event : records) {
                        Object value = event.record().value();
                        if (value instanceof Struct) {
                            Object op = ((Struct) value).get("op");
                            if ("r".equals(op)) {
                                counts[0]++;
                                if (counts[0] == snapshotRows) {
                                    emit("{\"event\": \"snapshot_done\", " + stamp() + "}");
                                }
                            } else if ("c".equals(op) || "u".equals(op) || "d".equals(op)) {
                                counts[1]++;
                                if (counts[1] == 1) {
                                    emit("{\"event\": \"stream_first\", " + stamp() + "}");
                                }
                                if (counts[1] == streamRows) {
                                    emit("{\"event\": \"stream_done\", " + stamp() + "}");
                                }
                            }
                        }
                        committer.markProcessed(event);
                    }
                    committer.markBatchFinished();
                    if (counts[0] >= snapshotRows && counts[1] >= streamRows) {
                        done.countDown();
                    }
                };

        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine =
                DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                        .using(props)
                        .notifying(consumer)
                        .using(
                                (success, message, err) -> {
                                    if (!success) {
                                        error = message + (err != null ? ": " + err : "");
                                    }
                                    done.countDown();
                                })
                        .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        emit("{\"event\": \"start\", " + stamp() + "}");
        executor.execute(engine);
        boolean reached = done.await(timeoutS, TimeUnit.SECONDS);
        if (!reached && error == null) {
            error = "timed out after " + timeoutS + " s";
        }
        engine.close();
        executor.shutdown();
        if (!executor.awaitTermination(60, TimeUnit.SECONDS)) {
            error = (error == null ? "" : error + "; ") + "the engine did not stop within 60 s";
        }
        boolean ok = error == null && counts[0] == snapshotRows && counts[1] == streamRows;
        emit(
                "{\"event\": \"end\", \"snapshot\": " + counts[0] + ", \"stream\": " + counts[1]
                        + ", \"ok\": " + ok + ", \"error\": " + quote(error) + "}");
        System.exit(ok ? 0 : 1);
    }
}
