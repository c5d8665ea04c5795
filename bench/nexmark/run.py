"""Run the Nexmark-style suite on lockgate and its peers; write a markdown report.

For every query (``queries.py``) and system, the runner starts the system's
own script in the system's own virtual environment (made by
``bench/setup_peers.sh``) as a separate process tree, measures it
(``process_tree.py``), checks its output against the expected result
(``check.py``; lockgate's output is checked the same way, so "equal" means
equal to lockgate's) and prints one JSON line per case. At the end it writes
``OUT/report.md`` (the table) and ``OUT/results.jsonl``.

Figures, per case:

* ``events_per_s``: the rows of the tables the query reads, divided by
  ``job_seconds``, the time from the job's submission (with the JVM / Spark
  session / Python interpreter already up) to its end, as the system's script
  measured it;
* ``cpu_s_per_m_events``: CPU seconds (user + system) of the whole process tree,
  start-up included, per million events;
* ``peak_mb``: the largest proportional set size of the whole process tree;
* ``x lockgate``: lockgate's events/s divided by the system's, for lockgate on
  each of its two executors.

A runner script's contract: ``python run_<system>.py --query Q --data DATA
--out OUT --work WORK --parallelism P --checkpoint-ms MS`` writes the query's
result under OUT (Parquet with the query's column names, or CSV without a
header) and prints, as its last line, a JSON object with at least ``system``,
``version``, ``query``, ``events``, ``job_seconds``, ``checkpointing`` and
``checkpoints`` (or ``not_supported`` with the reason). Usage::

    python bench/nexmark/run.py [--events 10000000] [--queries q0,q1,...]
                                [--systems lockgate-spark,lockgate-local,flink,spark,bytewax]
                                [--out out/nexmark] [--case-timeout 600]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from check import compare, expected
from generate import generate
from process_tree import run_measured
from queries import QUERIES

PEERS = ROOT / "bench" / ".peers"


@dataclass(frozen=True)
class System:
    name: str
    python: Path
    script: str
    extra: tuple[str, ...] = ()


SYSTEMS = {
    s.name: s
    for s in (
        System(
            "lockgate-spark",
            ROOT / ".venv" / "bin" / "python",
            "run_lockgate.py",
            ("--executor", "spark"),
        ),
        System(
            "lockgate-local",
            ROOT / ".venv" / "bin" / "python",
            "run_lockgate.py",
            ("--executor", "local"),
        ),
        System("flink", PEERS / "flink" / "bin" / "python", "run_flink.py"),
        System("spark", PEERS / "spark" / "bin" / "python", "run_spark.py"),
        System("bytewax", PEERS / "bytewax" / "bin" / "python", "run_bytewax.py"),
    )
}
LOCKGATE = ("lockgate-spark", "lockgate-local")
TARGETS = {"flink": 5.0, "bytewax": 20.0}


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


def run_case(
    system: System,
    query: str,
    data: Path,
    out: Path,
    args: argparse.Namespace,
    want: Any,
    want_rows: dict[str, int],
) -> dict[str, Any]:
    case_dir = out / "runs" / f"{query}-{system.name}"
    shutil.rmtree(case_dir, ignore_errors=True)
    result_dir, work_dir = case_dir / "result", case_dir / "work"
    work_dir.mkdir(parents=True)
    cmd = [
        str(system.python),
        str(HERE / system.script),
        "--query",
        query,
        "--data",
        str(data),
        "--out",
        str(result_dir),
        "--work",
        str(work_dir),
        "--parallelism",
        str(args.parallelism),
        "--checkpoint-ms",
        str(args.checkpoint_ms),
        *system.extra,
    ]
    record: dict[str, Any] = {"system": system.name, "query": query}
    if not system.python.exists():
        record["error"] = f"{system.python} is missing: run bash bench/setup_peers.sh"
        return record
    usage, stdout, stderr = run_measured(cmd, timeout_s=args.case_timeout)
    (case_dir / "stderr.log").write_text(stderr)
    (case_dir / "stdout.log").write_text(stdout)
    reported = _last_json(stdout) or {}
    record.update({k: v for k, v in reported.items() if k not in ("system", "query")})
    record["engine"] = reported.get("system", system.name)
    record.update(
        {
            "wall_s": round(usage.wall_s, 2),
            "cpu_s": round(usage.cpu_s, 2),
            "peak_mb": round(usage.peak_bytes / 2**20),
        }
    )
    if usage.timed_out:
        # it did not finish: its rate is below events / the time it was given
        events = sum(want_rows[t] for t in QUERIES[query].reads)
        record["events"] = events
        record["events_per_s_below"] = round(events / usage.wall_s)
        record["error"] = (
            f"did not finish within {args.case_timeout:g} s (process wall "
            f"time): fewer than {record['events_per_s_below']:,} events/s"
        )
        return record
    if usage.returncode != 0 or not reported:
        tail = " | ".join(stderr.strip().splitlines()[-3:])[-400:]
        record["error"] = f"exit code {usage.returncode}: {tail}"
        return record
    if "not_supported" in reported:
        return record
    events, seconds = reported["events"], reported["job_seconds"]
    record["events_per_s"] = round(events / seconds) if seconds > 0 else None
    record["cpu_s_per_m_events"] = round(usage.cpu_s / events * 1e6, 2)
    check = compare(query, data, result_dir, want)
    record["check"] = check
    if not args.keep_results:
        shutil.rmtree(result_dir, ignore_errors=True)
    return record


def _fmt_int(v: Any) -> str:
    return f"{v:,}" if isinstance(v, (int, float)) else "-"


def _short(text: str, limit: int = 70) -> str:
    """The first ``limit`` characters of a runner's description (the whole is in
    results.jsonl and in the notes below the table)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _rate_text(r: dict[str, Any]) -> str:
    if r.get("events_per_s_below"):
        return f"< {r['events_per_s_below']:,}"
    return _fmt_int(r.get("events_per_s"))


def _ratio_text(r: dict[str, Any], lockgate: str) -> str:
    if f"x_{lockgate}" in r:
        return f"{r[f'x_{lockgate}']:.2f}"
    if f"x_{lockgate}_above" in r:
        return f"> {r[f'x_{lockgate}_above']:.2f}"
    return "-"


def _at_least(r: dict[str, Any], lockgate: str) -> float:
    """The smallest ratio lockgate/peer the record allows (0 when unknown)."""
    return float(r.get(f"x_{lockgate}", r.get(f"x_{lockgate}_above", 0.0)))


def _result_text(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"failed: {r['error']}"
    if "not_supported" in r:
        return f"not comparable: {r['not_supported']}"
    check = r.get("check", {})
    query = QUERIES[r["query"]]
    if query.compare != "rows":
        verdict = "totals equal" if check.get("equal") else "totals differ"
        return f"{verdict} ({check.get('detail')}); rows not comparable: processing time"
    return ("equal" if check.get("equal") else "DIFFERS") + f" ({check.get('detail')})"


def ratios(records: list[dict[str, Any]]) -> None:
    """Add ``x_<lockgate system>``: that lockgate's events/s over this record's."""
    best = {(r["query"], r["system"]): r.get("events_per_s") for r in records}
    for r in records:
        for lg_name in LOCKGATE:
            mine, theirs = best.get((r["query"], lg_name)), r.get("events_per_s")
            if mine and theirs and r.get("check", {}).get("equal", True):
                r[f"x_{lg_name}"] = round(mine / theirs, 2)
            elif mine and r.get("events_per_s_below"):
                # a peer that timed out: lockgate is at least this many times faster
                r[f"x_{lg_name}_above"] = round(mine / r["events_per_s_below"], 2)


def report(
    records: list[dict[str, Any]], args: argparse.Namespace, manifest: dict, seconds: float
) -> str:
    cores = os.cpu_count()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines = [
        "# Nexmark-style suite: lockgate and its peers",
        "",
        f"Run on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()}: {cores} cores, {mem:.0f} GiB, {platform.platform()}; "
        f"whole suite {seconds / 60:.1f} min.",
        f"Data: {manifest['params']['events']:,} events (seed {manifest['params']['seed']}): "
        + ", ".join(f"{n:,} {t}s" for t, n in manifest["rows"].items())
        + f"; {manifest['params']['files']} part files per table. Parallelism "
        f"{args.parallelism}; checkpoints every {args.checkpoint_ms} ms where the "
        "system has them.",
        "",
        "events/s = rows read / job time (submission to end, session already up); "
        "CPU-s/M = CPU seconds of the whole process tree (start-up included) per million "
        "events; peak MB = largest proportional set size of the process tree; "
        "x lockgate = lockgate's events/s / the system's (lockgate on Spark / on the "
        "local executor).",
        "",
        "| query | system | events/s | job s | x lockgate (spark / local) | CPU-s/M | "
        "peak MB | checkpointing (completed) | input | result |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in records:
        x = " / ".join(_ratio_text(r, n) for n in LOCKGATE)
        ck = _short(r.get("checkpointing", "-"))
        if r.get("checkpoints") is not None:
            ck += f" ({r['checkpoints']})"
        lines.append(
            f"| {r['query']} | {r.get('engine', r['system'])} {r.get('version', '')} | "
            f"{_rate_text(r)} | {r.get('job_seconds', '-')} | {x} | "
            f"{r.get('cpu_s_per_m_events', '-')} | {r.get('peak_mb', '-')} | {ck} | "
            f"{r.get('input', '-')} | {_short(_result_text(r), 120)} |"
        )
    lines += [
        "",
        "## Targets",
        "",
        "lockgate at least 5 x Flink SQL's events/s and 20 x Bytewax's on "
        + ", ".join(q for q in QUERIES if QUERIES[q].targeted)
        + ":",
        "",
        "| query | peer | target | x lockgate (spark) | x lockgate (local) | met |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in records:
        if r["system"] in TARGETS and QUERIES[r["query"]].targeted:
            need = TARGETS[r["system"]]
            met = ", ".join(f"{n}: {'yes' if _at_least(r, n) >= need else 'no'}" for n in LOCKGATE)
            lines.append(
                f"| {r['query']} | {r['system']} | {need:g} | "
                f"{_ratio_text(r, LOCKGATE[0])} | {_ratio_text(r, LOCKGATE[1])} | "
                f"{met} |"
            )
    notes = [f"- {r['query']} {r['system']}: {r['note']}" for r in records if r.get("note")]
    first: dict[str, dict[str, Any]] = {}
    for r in records:
        first.setdefault(r["system"], r)
    notes += [
        f"- {name} checkpointing: {r['checkpointing']}; settings: {r.get('settings', '-')}"
        for name, r in first.items()
        if r.get("checkpointing")
    ]
    if notes:
        lines += ["", "## Notes from the runners", "", *notes]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "nexmark")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--checkpoint-ms", type=int, default=1000)
    ap.add_argument("--case-timeout", type=float, default=240)
    ap.add_argument("--keep-results", action="store_true")
    args = ap.parse_args()
    queries = [q for q in args.queries.split(",") if q]
    systems = [s for s in args.systems.split(",") if s]
    unknown = [q for q in queries if q not in QUERIES] + [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(
            f"unknown queries or systems {unknown}: queries are {', '.join(QUERIES)}; "
            f"systems are {', '.join(SYSTEMS)}"
        )
    started = time.perf_counter()
    data = args.out / "data"
    manifest = generate(data, args.events, args.seed, files=args.parallelism)
    print(json.dumps({"data": str(data), **manifest}), flush=True)
    records = []
    for query in queries:
        want = expected(query, data)
        for name in systems:
            record = run_case(SYSTEMS[name], query, data, args.out, args, want, manifest["rows"])
            records.append(record)
            print(json.dumps(record), flush=True)
    ratios(records)
    seconds = time.perf_counter() - started
    text = report(records, args, manifest, seconds)
    (args.out / "report.md").write_text(text)
    with open(args.out / "results.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print(text)
    print(
        json.dumps(
            {
                "suite_seconds": round(seconds, 1),
                "report": str(args.out / "report.md"),
                "cores": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
