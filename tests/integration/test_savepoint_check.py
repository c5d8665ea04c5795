"""``lockgate.savepoint.check(path, env)`` and ``lockgate savepoint check SAVEPOINT JOB``:
a savepoint checked against a job before deploying it answers, per operator and state,
what a restore would do, and exits 0 exactly when ``run --restore`` would restore:
the same job; an evolved state; an incompatible change; a removed operator; a
parallelism above the old max parallelism (docs/state_evolution.md, M-S2)."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import wait_until

RECORDS = 200

JOB = """
import dataclasses
import sys
from typing import Optional

import lockgate as lg


@dataclasses.dataclass
class StatsV1:
    total: int
    count: int


@dataclasses.dataclass
class StatsV2:
    total: float
    n: int
    label: str = "v2"


@dataclasses.dataclass
class StatsBroken:
    total: str
    count: int


TYPES = {
    "v1": (StatsV1, None),
    "v2": (StatsV2, {"n": "count"}),
    "broken": (StatsBroken, None),
    "nosink": (StatsV1, None),
    "wide": (StatsV1, None),
}


class Counter(lg.KeyedProcessFunction):
    def __init__(self, version):
        self.version = version

    def open(self, ctx):
        cls, aliases = TYPES[self.version]
        self.stats = ctx.get_state(lg.ValueStateDescriptor("stats", type=cls, aliases=aliases))
        self.seen = ctx.get_state(lg.ValueStateDescriptor("seen", default=0))

    def process_element(self, r, ctx):
        self.seen.update(self.seen.value() + 1)
        s = self.stats.value() or StatsV1(0, 0)
        s.total += r["v"]
        s.count += 1
        self.stats.update(s)
        yield {"k": ctx.current_key, "count": s.count}


def build(version, out, parallelism=2):
    env = lg.StreamEnvironment(parallelism=parallelism)
    if version == "wide":  # the default max parallelism, and above the old one
        env.set_parallelism(12)
    else:
        env.set_max_parallelism(8)
    env.enable_checkpointing(100)
    source = lg.connectors.SequenceSource(0, 200, bounded=False)
    stream = env.from_source(source, name="numbers").uid("numbers")
    counted = (
        stream.map(lambda i: {"k": i % 10, "v": i}).uid("records")
        .key_by("k").process(Counter(version), name="counter").uid("typed-counter")
    )
    if version != "nosink":
        counted.sink_to(lg.connectors.FileSink(out, format="jsonl")).uid("sink")
    else:
        counted.print().uid("printer")
    return env


if __name__ == "__main__":
    build(sys.argv[1], sys.argv[2]).execute("typed job", executor=lg.LocalExecutor())
"""


def read_jsonl(folder: Path) -> list[Any]:
    return [
        json.loads(line)
        for f in sorted(folder.rglob("*"))
        if f.is_file() and not f.name.startswith((".", "_"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]


@pytest.fixture(scope="module")
def job_and_savepoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("check")
    job = folder / "job.py"
    job.write_text(JOB)
    env = runpy.run_path(str(job))["build"]("v1", str(folder / "out"))
    env.checkpoint_config.storage = str(folder / "chk")
    client = env.execute_async("typed job", executor=lg.LocalExecutor())
    try:
        wait_until(
            lambda: len(read_jsonl(folder / "out")) == RECORDS,
            "the first version's output was committed",
            timeout_s=120,
        )
        location = client.stop_with_savepoint(str(folder / "sp"), timeout=60)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(60).status is lg.JobStatus.FINISHED
    return job, location


def checked(job: Path, location: str, version: str, **kw: Any) -> lg.savepoint.CheckReport:
    env = runpy.run_path(str(job))["build"](version, str(job.parent / f"out-{version}"))
    return lg.savepoint.check(location, env, **kw)


def cli(job: Path, location: str, version: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "lockgate.cli",
            "savepoint",
            "check",
            *flags,
            location,
            str(job),
            version,
            str(job.parent / f"out-{version}"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def state(report: lg.savepoint.CheckReport, name: str) -> lg.savepoint.StateCheck:
    return next(s for s in report.operator("typed-counter").states if s.name == name)


def test_the_same_job_is_compatible_and_restorable(job_and_savepoint: tuple[Path, str]) -> None:
    job, location = job_and_savepoint
    report = checked(job, location, "v1")
    assert report.ok, report.format()
    assert state(report, "stats").status == "compatible"
    assert state(report, "seen").status == "untyped"  # pickled: not checkable
    assert report.operator("typed-counter").status == "matched"
    assert report.operator("sink").status == "matched"
    done = cli(job, location, "v1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "state 'stats' (value): compatible" in done.stdout
    assert "restorable: yes" in done.stdout


def test_an_evolved_state_says_what_changes_and_is_restorable(
    job_and_savepoint: tuple[Path, str],
) -> None:
    job, location = job_and_savepoint
    report = checked(job, location, "v2")
    assert report.ok, report.format()
    s = state(report, "stats")
    assert s.status == "evolved"
    assert "field 'total' widened from int64 to double" in s.detail
    assert "field 'count' renamed to 'n'" in s.detail
    assert "field 'label' added (default 'v2')" in s.detail
    assert cli(job, location, "v2").returncode == 0


def test_an_incompatible_change_is_refused_with_the_reason(
    job_and_savepoint: tuple[Path, str],
) -> None:
    job, location = job_and_savepoint
    report = checked(job, location, "broken")
    assert not report.ok
    s = state(report, "stats")
    assert s.status == "incompatible"
    assert "field 'total' changed type from int64 to string" in s.detail
    done = cli(job, location, "broken")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "restorable: NO" in done.stdout


def test_a_removed_operator_needs_allow_non_restored_state(
    job_and_savepoint: tuple[Path, str],
) -> None:
    job, location = job_and_savepoint
    report = checked(job, location, "nosink")
    assert report.operator("sink").status == "dropped"
    assert report.operator("printer").status == "new"
    assert report.needs_allow_non_restored_state and not report.ok
    assert checked(job, location, "nosink", allow_non_restored_state=True).ok
    assert cli(job, location, "nosink").returncode == 1
    allowed = cli(job, location, "nosink", "--allow-non-restored-state")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_a_parallelism_above_the_old_max_parallelism_is_refused(
    job_and_savepoint: tuple[Path, str],
) -> None:
    job, location = job_and_savepoint
    report = checked(job, location, "wide")
    assert not report.ok
    problems = report.operator("typed-counter").problems
    assert any("parallelism 12 is above the max parallelism 8" in p for p in problems), problems
    assert any("max parallelism changed from 8 to" in p for p in problems), problems
    assert cli(job, location, "wide").returncode == 1
