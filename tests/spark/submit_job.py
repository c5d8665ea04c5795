"""The job ``lockgate submit`` sends to the multi-host cluster in
``test_multi_host_cluster.py``: ``python submit_job.py OUT_URL STORAGE_URL N``. An endless
sequence (it stays running after ``N`` values, so the test stops it) at 500 records per
second, keyed running sums, exactly-once into a FileSink, checkpoints every 500 ms."""

import sys

import lockgate as lg
from lockgate.connectors import FileSink, SequenceSource


def main(out: str, storage: str, n: int) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(500)
    env.checkpoint_config.storage = storage
    (
        env.from_source(SequenceSource(0, n, rows_per_second=500, bounded=False), name="numbers")
        .uid("numbers")
        .key_by(lambda x: x % 7)
        .map(lambda x: {"v": x})
        .uid("records")
        .sink_to(FileSink(out, format="jsonl"), name="files")
        .uid("files")
    )
    env.execute("submitted")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
