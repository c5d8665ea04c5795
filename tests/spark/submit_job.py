"""The job ``lockgate submit`` sends to the multi-host cluster in
``test_multi_host_cluster.py``: ``python submit_job.py OUT_URL STORAGE_URL N [DSN TABLE
PREFIX]``. An endless sequence (it stays running after ``N`` values, so the test stops it) at
500 records per second, keyed running sums (``cluster_driver.SumWithPid``: ``key``, ``v``,
``sum``, ``pid``) exactly-once into a FileSink and, given a DSN, a PostgresSink;
checkpoints every 500 ms."""

import sys

import cloudpickle
import cluster_driver  # this folder: lockgate run puts the job file's folder on sys.path

import lockgate as lg
from lockgate.connectors import FileSink, PostgresSink, SequenceSource

# the executors need not import the test folder: the job's functions travel by value
cloudpickle.register_pickle_by_value(cluster_driver)


def main(out: str, storage: str, n: int, postgres: list[str]) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(500)
    env.checkpoint_config.storage = storage
    sums = (
        env.from_source(SequenceSource(0, n, rows_per_second=500, bounded=False), name="numbers")
        .uid("numbers")
        .key_by(lambda x: x % 7)
        .process(cluster_driver.SumWithPid(), name="sums")
        .uid("sums")
    )
    sums.sink_to(FileSink(out, format="jsonl"), name="files").uid("files")
    if postgres:
        dsn, table, prefix = postgres
        sink = PostgresSink(dsn, table, transaction_prefix=prefix)
        sums.sink_to(sink, name="postgres").uid("postgres")
    env.execute("submitted")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:7])
