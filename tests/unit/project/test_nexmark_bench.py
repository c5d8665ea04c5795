"""The benchmark suite's own parts (``bench/nexmark``, issues 9 and 23): a deterministic
generator, a checker that notices a wrong result (its join oracles against a plain Python
computation), Flink SQL's changelog replay, and the process-tree measurement."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

BENCH = Path(__file__).resolve().parents[3] / "bench" / "nexmark"
sys.path.insert(0, str(BENCH))

import check  # noqa: E402
import generate  # noqa: E402
import pytest  # noqa: E402
import run_flink  # noqa: E402
from process_tree import run_measured  # noqa: E402
from queries import MAX_AUCTION_MS, Q3_CATEGORY, Q3_STATES  # noqa: E402


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("part-*"))
    }


def test_the_same_seed_gives_the_same_files_and_another_seed_other_ones(tmp_path: Path) -> None:
    a = generate.generate(tmp_path / "a", 20_000, seed=1, files=2)
    generate.generate(tmp_path / "b", 20_000, seed=1, files=2)
    c = generate.generate(tmp_path / "c", 20_000, seed=2, files=2)
    assert a["rows"] == {"person": 400, "auction": 1200, "bid": 18400} == c["rows"]
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    assert len(_digest(tmp_path / "a")) == 12  # 3 tables x 2 files x (parquet, csv)


def test_every_part_file_covers_the_whole_time_range_in_order(tmp_path: Path) -> None:
    generate.generate(tmp_path, 50_000, seed=3, files=2)
    for table in generate.TABLES:
        parts = sorted((tmp_path / "parquet" / table).glob("*.parquet"))
        spans = []
        for part in parts:
            ts = pq.read_table(part)["date_time"].to_numpy()
            assert (ts[1:] >= ts[:-1]).all(), f"{part} is not in time order"
            spans.append((int(ts[0]), int(ts[-1])))
        # each reader starts at the first second and ends at the last (within one run)
        assert max(s for s, _ in spans) - min(s for s, _ in spans) <= 100 + generate.RUN // 10
        assert max(e for _, e in spans) - min(e for _, e in spans) <= 100 + generate.RUN // 10


def test_the_csv_copy_holds_the_same_rows_as_the_parquet_files(tmp_path: Path) -> None:
    generate.generate(tmp_path, 10_000, seed=4, files=2)
    schema = generate.SCHEMAS["auction"]
    for part in sorted((tmp_path / "parquet" / "auction").glob("*.parquet")):
        csv = pacsv.read_csv(
            part.with_suffix(".csv").as_posix().replace("/parquet/", "/csv/"),
            read_options=pacsv.ReadOptions(column_names=schema.names),
            convert_options=pacsv.ConvertOptions(
                column_types={f.name: f.type for f in schema}, strings_can_be_null=False
            ),
        )
        assert csv.equals(pq.read_table(part))


def test_the_checker_accepts_the_expected_rows_in_any_order_and_format(tmp_path: Path) -> None:
    generate.generate(tmp_path / "data", 200_000, seed=5, files=2)
    want = check.expected("q5", tmp_path / "data")
    assert want.num_rows > 10
    (tmp_path / "pq").mkdir()
    pq.write_table(want.slice(5), tmp_path / "pq" / "part-1.parquet")
    pq.write_table(want.slice(0, 5), tmp_path / "pq" / "part-0.parquet")
    (tmp_path / "pq" / "_spark_metadata").mkdir()
    (tmp_path / "pq" / "_spark_metadata" / "0").write_text("ignored")
    assert check.compare("q5", tmp_path / "data", tmp_path / "pq")["equal"]
    (tmp_path / "csv").mkdir()
    pacsv.write_csv(
        want.select(["auction", "num", "window_start", "window_end"]),
        tmp_path / "csv" / "part-0",
        pacsv.WriteOptions(include_header=False),
    )
    assert check.compare("q5", tmp_path / "data", tmp_path / "csv")["equal"]


def test_the_checker_reports_a_missing_a_changed_and_a_duplicated_row(tmp_path: Path) -> None:
    generate.generate(tmp_path / "data", 200_000, seed=5, files=2)
    want = check.expected("q7", tmp_path / "data")
    cases = {
        "missing": want.slice(1),
        "changed": want.set_column(
            2, "price", pa.array([want["price"][0].as_py() + 1] + want["price"].to_pylist()[1:])
        ),
        "duplicated": pa.concat_tables([want, want.slice(0, 1)]),
    }
    for name, table in cases.items():
        (tmp_path / name).mkdir()
        pq.write_table(table, tmp_path / name / "part-0.parquet")
        result = check.compare("q7", tmp_path / "data", tmp_path / name)
        assert not result["equal"], name
        assert result["detail"], name


def test_the_checker_compares_q1_prices_to_the_cent_fraction(tmp_path: Path) -> None:
    generate.generate(tmp_path / "data", 5_000, seed=6, files=1)
    want = check.expected("q1", tmp_path / "data")
    (tmp_path / "ok").mkdir()
    # a decimal rendering of 0.908 * price (as Flink SQL writes it) is equal
    pacsv.write_csv(want, tmp_path / "ok" / "part-0", pacsv.WriteOptions(include_header=False))
    assert check.compare("q1", tmp_path / "data", tmp_path / "ok")["equal"]
    off = want.set_column(2, "price", pa.array([p + 0.001 for p in want["price"].to_pylist()]))
    (tmp_path / "off").mkdir()
    pq.write_table(off, tmp_path / "off" / "part-0.parquet")
    assert not check.compare("q1", tmp_path / "data", tmp_path / "off")["equal"]


def _rows(data: Path, table: str) -> list[dict]:
    return pq.read_table(data / "parquet" / table).to_pylist()


def _running_pairs(data: Path) -> list[tuple[dict, dict]]:
    """Every (auction, bid) pair with the bid placed while the auction ran, by brute force."""
    auctions = {a["id"]: a for a in _rows(data, "auction")}
    return [
        (auctions[b["auction"]], b)
        for b in _rows(data, "bid")
        if auctions[b["auction"]]["date_time"]
        <= b["date_time"]
        <= auctions[b["auction"]]["expires"]
    ]


def test_the_auctions_run_one_second_to_the_bound_q4_and_q9_rely_on(tmp_path: Path) -> None:
    generate.generate(tmp_path, 100_000, seed=8, files=2)
    runs = [a["expires"] - a["date_time"] for a in _rows(tmp_path, "auction")]
    assert min(runs) >= 1000 and max(runs) < MAX_AUCTION_MS
    assert max(runs) > MAX_AUCTION_MS - 1000  # the bound is tight, not a loose guess


def test_the_join_oracles_equal_a_plain_python_computation(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate.generate(data, 20_000, seed=9, files=2)
    persons = {p["id"]: p for p in _rows(data, "person") if p["state"] in Q3_STATES}
    q3 = sorted(
        (
            persons[a["seller"]]["name"],
            persons[a["seller"]]["city"],
            persons[a["seller"]]["state"],
            a["id"],
        )
        for a in _rows(data, "auction")
        if a["category"] == Q3_CATEGORY and a["seller"] in persons
    )
    got3 = check.expected("q3", data).to_pylist()
    assert len(q3) > 20
    assert sorted((r["name"], r["city"], r["state"], r["id"]) for r in got3) == q3

    pairs = _running_pairs(data)
    best: dict[int, tuple[dict, dict]] = {}
    for a, b in pairs:
        old = best.get(a["id"])
        key = (-b["price"], b["date_time"], b["bidder"])
        if old is None or key < (-old[1]["price"], old[1]["date_time"], old[1]["bidder"]):
            best[a["id"]] = (a, b)
    q9 = sorted(
        (
            a["id"],
            a["category"],
            a["date_time"],
            a["expires"],
            b["bidder"],
            b["price"],
            b["date_time"],
        )
        for a, b in best.values()
    )
    got9 = check.expected("q9", data).to_pylist()
    assert sorted(tuple(r.values()) for r in got9) == q9

    finals: dict[int, list[int]] = {}
    for a, b in best.values():
        finals.setdefault(a["category"], []).append(b["price"])
    got4 = {r["category"]: r["final"] for r in check.expected("q4", data).to_pylist()}
    assert got4 == {c: sum(v) / len(v) for c, v in finals.items()}
    assert len(got4) == 5


def test_a_flink_changelog_replays_into_the_final_rows(tmp_path: Path) -> None:
    log = tmp_path / "changelog"
    log.mkdir()
    # Flink's debezium-json: inserts and update-afters as "c", deletes and
    # update-befores as "d"
    (log / "part-0").write_text(
        '{"before":null,"after":{"category":10,"final":2.5},"op":"c"}\n'
        '{"before":{"category":10,"final":2.5},"after":null,"op":"d"}\n'
        '{"before":null,"after":{"category":10,"final":3.25},"op":"c"}\n'
        '{"before":null,"after":{"category":11,"final":1.0},"op":"c"}\n'
    )
    (log / ".part-1.inprogress").write_text("not json")  # hidden files are skipped
    out = tmp_path / "out"
    out.mkdir()
    assert run_flink.replay_changelog(log, "q4", out) == 4
    rows = pacsv.read_csv(
        out / "part-0.csv", read_options=pacsv.ReadOptions(column_names=["category", "final"])
    ).to_pylist()
    assert sorted((r["category"], r["final"]) for r in rows) == [(10, 3.25), (11, 1.0)]

    (log / "part-2").write_text('{"before":{"category":12,"final":9.0},"after":null,"op":"d"}\n')
    with pytest.raises(SystemExit, match="never inserted"):
        run_flink.replay_changelog(log, "q4", out)


def test_the_process_tree_measure_counts_a_child_s_cpu_and_memory() -> None:
    child = (
        "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])\n"
        "while time.process_time() < 0.6: pass"
    )
    usage, out, _ = run_measured(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}], "
            "check=True); print('done')",
        ],
        timeout_s=60,
        interval_s=0.05,
    )
    assert usage.returncode == 0 and out.strip() == "done" and not usage.timed_out
    assert usage.cpu_s >= 0.6
    assert usage.peak_bytes >= 200 * 2**20


def test_the_process_tree_measure_kills_a_command_that_runs_too_long() -> None:
    usage, _, _ = run_measured(
        [sys.executable, "-c", "import sys; sys.stdin = None\nwhile True: pass"], timeout_s=0.5
    )
    assert usage.timed_out
    assert usage.returncode != 0
