"""``lockgate run --restore PATH``: a job file restarts from a retained checkpoint (M-R3)."""

from __future__ import annotations

import textwrap

from test_checkpointing import cancel_after_checkpoints
from test_recovery import SPLIT, by_value, expected_records, published, unbounded_sums

import lockgate as lg
from lockgate import cli


def job_file(state_backend: str = "", job_name: str = "cli restore") -> str:
    """The text of a job file: a keyed running sum into an exactly-once FileSink, with
    checkpoints every 200 ms in ``argv[2]``, ``state_backend`` (a statement, or nothing)."""
    return (
        textwrap.dedent("""
    import sys
    import lockgate as lg
    from lockgate.connectors import FileSink, SequenceSource

    CHUNK = 6_000

    class RunningSum(lg.KeyedProcessFunction):
        def open(self, ctx):
            self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=(0, -1)))

        def process_element(self, value, ctx):
            total, _ = self.total.value()
            total += value["v"]
            self.total.update((total, value["v"]))
            yield {"k": value["k"], "v": value["v"], "sum": total}

    out, storage, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = storage
    {state_backend}
    (env.from_source(SequenceSource(0, n, batch_size=500)).uid("numbers")
        .map(lambda x: {"k": x // CHUNK, "v": x}, name="to record")
        .key_by(lambda r: r["k"]).process(RunningSum(), name="running sum").uid("sums")
        .sink_to(FileSink(out, format="jsonl"), name="files").uid("files"))
    env.execute({job_name!r})
""")
        .replace("{state_backend}", state_backend)
        .replace("{job_name!r}", repr(job_name))
    )


JOB = job_file()


def test_m_r3_lockgate_run_restore_continues_a_cancelled_job_from_its_checkpoint(tmp_path) -> None:
    n = 2 * SPLIT
    # half the numbers, waiting for more after them: cancelled before the end, however
    # slow the machine; the restored run reads on to n
    client = unbounded_sums(lg.LocalExecutor(), tmp_path, n // 2).execute_async("to cancel")
    cancel_after_checkpoints(client, 2, "two checkpoints completed")
    assert len(published(str(tmp_path / "out"))) < n
    job = tmp_path / "job.py"
    job.write_text(JOB)
    storage = str(tmp_path / "checkpoints")
    rc = cli.main(
        [
            "run",
            "--executor",
            "local",
            "--restore",
            storage,
            str(job),
            str(tmp_path / "out"),
            storage,
            str(n),
        ]
    )
    assert rc == 0
    assert by_value(published(str(tmp_path / "out"))) == expected_records(n)


def test_lockgate_run_restore_rejects_a_missing_folder(tmp_path, capsys) -> None:
    """(``--allow-non-restored-state`` alone applies to a job resuming from its own
    storage, M-C8: tests/integration/test_driver_restart.py.)"""
    job = tmp_path / "job.py"
    job.write_text("print('never runs')\n")
    rc = cli.main(["run", "--restore", str(tmp_path / "nowhere"), str(job)])
    assert rc == 2
    assert "--restore" in capsys.readouterr().err
