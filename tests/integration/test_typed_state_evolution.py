"""Typed state through a savepoint and a code change, end to end on both executors
(docs/state_evolution.md, M-S1, M-T4): a job keeps a dataclass per key, is stopped
with a savepoint, and its next version restores with an evolved type (a field widened,
one renamed through an alias, one added with a default) and continues exactly; a
version with an incompatible type is refused before any record flows, naming the
operator's uid, the state, the field and both types."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import FileProbe, wait_until

KEYS = 10
FIRST = 200  # records of the first version: 20 per key
MORE = 100  # records of the second version: 10 per key
UID = "typed-counter"


@dataclasses.dataclass
class StatsV1:
    total: int
    count: int


@dataclasses.dataclass
class StatsV2:
    total: float  # widened
    n: int  # renamed from count
    label: str = "v2"  # added with a default


@dataclasses.dataclass
class StatsBroken:
    total: str  # int -> str: refused
    count: int


class Counter(lg.KeyedProcessFunction):
    def __init__(self, version: int, probe: FileProbe | None = None) -> None:
        self.version = version
        self.probe = probe

    def open(self, ctx: lg.RuntimeContext) -> None:
        if self.version == 1:
            d = lg.ValueStateDescriptor("stats", type=StatsV1)
        elif self.version == 2:
            d = lg.ValueStateDescriptor("stats", type=StatsV2, aliases={"n": "count"})
        else:
            d = lg.ValueStateDescriptor("stats", type=StatsBroken)
        self.stats = ctx.get_state(d)

    def process_element(self, r: dict[str, int], ctx: Any) -> Any:
        s = self.stats.value()
        if self.version == 1:
            s = StatsV1(0, 0) if s is None else s
            s.total += r["v"]
            s.count += 1
            if self.probe is not None and s.count == FIRST // KEYS:
                self.probe.add(ctx.current_key)
            self.stats.update(s)
            yield {"k": ctx.current_key, "total": s.total, "count": s.count}
        else:
            s = StatsV2(0.0, 0) if s is None else s
            s.total += r["v"]
            s.n += 1
            self.stats.update(s)
            yield {"k": ctx.current_key, "total": s.total, "count": s.n, "label": s.label}


def to_record(i: int) -> dict[str, int]:
    return {"k": i % KEYS, "v": i}


def first_version(tmp_path: Path) -> str:
    """Run version 1 over records 0..FIRST-1 and stop it with a savepoint."""
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "chk-1")
    source = lg.connectors.SequenceSource(0, FIRST, bounded=False)  # stays running
    stream = env.from_source(source, name="numbers").uid("numbers-1")
    stream.map(to_record).uid("records-1").key_by("k").process(
        Counter(1, probe), name="counter"
    ).uid(UID).sink_to(lg.connectors.FileSink(str(tmp_path / "out-1"), format="jsonl")).uid(
        "sink-1"
    )
    client = env.execute_async("typed v1", executor=lg.LocalExecutor())
    try:
        wait_until(
            lambda: len(set(probe.items)) == KEYS, "version 1 counted every key", timeout_s=120
        )
        location = client.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(60).status is lg.JobStatus.FINISHED
    return location


def next_version(tmp_path: Path, location: str, version: int, executor: Any) -> Path:
    env = lg.StreamEnvironment(parallelism=1)  # rescaled as well
    folder = tmp_path / f"out-v{version}"
    more = env.from_collection(list(range(FIRST, FIRST + MORE)), name="more").uid("more")
    more.map(to_record).uid("records-2").key_by("k").process(Counter(version), name="counter").uid(
        UID
    ).sink_to(lg.connectors.FileSink(str(folder), format="jsonl")).uid("sink-2")
    env.execute(
        f"typed v{version}",
        executor=executor,
        restore_from=location,
        allow_non_restored_state=True,  # version 1's source, map and sink are gone
    )
    return folder


def read_jsonl(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted(folder.rglob("*"))
        if f.is_file() and not f.name.startswith((".", "_"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]


@pytest.mark.hang_guard(300)
def test_an_evolved_type_restores_from_a_savepoint_and_continues_exactly_M_S1(
    tmp_path: Path, executor: Any
) -> None:
    location = first_version(tmp_path)
    frame = lg.savepoint.read(location).state(UID, "stats").to_pandas()
    # read without the job's classes: structs as dicts
    assert sorted(frame["value"].map(lambda v: v["count"])) == [FIRST // KEYS] * KEYS
    info = lg.savepoint.read(location).operators()[UID]
    assert [(s.name, s.type) for s in info.states] == [("stats", "StatsV1")]

    out = read_jsonl(next_version(tmp_path, location, 2, executor))
    last: dict[int, dict[str, Any]] = {}
    for r in out:
        if r["k"] not in last or r["count"] > last[r["k"]]["count"]:
            last[r["k"]] = r
    assert len(out) == MORE
    for k in range(KEYS):
        values = [i for i in range(FIRST + MORE) if i % KEYS == k]
        assert last[k] == {
            "k": k,
            "total": float(sum(values)),
            "count": len(values),
            "label": "v2",
        }, f"key {k}"
        counts = sorted(r["count"] for r in out if r["k"] == k)
        assert counts == list(range(FIRST // KEYS + 1, (FIRST + MORE) // KEYS + 1))


@pytest.mark.hang_guard(300)
def test_an_incompatible_type_is_refused_before_any_record_naming_uid_field_and_types(
    tmp_path: Path, executor: Any
) -> None:
    location = first_version(tmp_path)
    with pytest.raises(lg.JobFailedError) as caught:
        next_version(tmp_path, location, 3, executor)
    message = str(caught.value)
    assert f"uid '{UID}'" in message and "state 'stats'" in message, message
    assert "field 'total' changed type from int64 to string" in message, message
    out = tmp_path / "out-v3"
    assert not out.exists() or not read_jsonl(out), "records flowed before the refusal"
