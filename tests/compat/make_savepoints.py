"""Write this release's savepoints of the compatibility jobs (run by hand, once per
release, then commit what it wrote):

    .venv/bin/python tests/compat/make_savepoints.py [CASE ...]

For each case of ``compat_cases.CASES`` it runs the case's job until a few checkpoints
completed (its source paced by completed checkpoints, so windows, timers, join buffers
and requests are open), stops it with a savepoint into
``tests/compat/savepoints/<version>/<case>/savepoint`` (or, for an incremental RocksDB
case, cancels it and exports its newest retained checkpoint there), then restores that
once and writes what the restored job outputs to ``expected.json.gz`` beside it, after
checking that it equals the case's reference (an oracle, or the job run straight
through). ``test_compat.py`` restores every folder found there on the code of the day.
The case ``records`` writes one of every state record instead (compat_records.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import compat_records  # noqa: E402
from compat_cases import BACKENDS, CASES, ROOT, Case, write_expected  # noqa: E402

import lockgate as lg  # noqa: E402
from checkpoint_paced import CheckpointPacedSource  # noqa: E402
from lockgate.checkpoint.export import export_checkpoint  # noqa: E402

#: completed checkpoints before the savepoint is taken (incremental ones share files)
CHECKPOINTS = 4


def write_savepoint(case: Case, folder: Path) -> None:
    env = case.job.environment(lg.LocalExecutor())
    env.set_state_backend(BACKENDS[case.backend]())
    env.enable_checkpointing(100)
    with tempfile.TemporaryDirectory() as tmp:
        env.checkpoint_config.storage = str(Path(tmp) / "chk")
        if case.native:
            env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
        case.job.build(env, CheckpointPacedSource(case.job.bounded_source(), case.pace, 10**6))
        client = env.execute_async(case.name)
        deadline = time.monotonic() + 120
        while len([c for c in client.checkpoints() if c.status == "completed"]) < CHECKPOINTS:
            if time.monotonic() > deadline or client.done():
                raise SystemExit(f"{case.name}: {CHECKPOINTS} checkpoints did not complete")
            time.sleep(0.05)
        if not case.native:
            client.stop_with_savepoint(str(folder))
            return
        client.cancel()
        client.wait(120)
        # the newest retained checkpoint, with the shared files it references
        export_checkpoint(env.checkpoint_config.storage, str(folder))


def expected_of(case: Case, folder: Path) -> dict[str, list]:
    env = case.job.environment(lg.LocalExecutor())
    env.set_state_backend(BACKENDS[case.backend]())
    case.job.build(env, case.job.bounded_source())
    result = env.execute(case.name, restore_from=str(folder))
    restored_in = result.records_out("numbers")
    out = case.job.outputs(result)
    if out != case.reference():
        raise SystemExit(f"{case.name}: the job restored from {folder} is not the reference")
    print(f"{case.name}: restored job read {restored_in} of {case.job.N} records")
    return out


def main() -> None:
    root = ROOT / lg.__version__
    for name in sys.argv[1:] or [*CASES, "records"]:
        folder = root / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        if name == "records":
            compat_records.write(folder)
        else:
            case = CASES[name]
            write_savepoint(case, folder / "savepoint")
            write_expected(folder, expected_of(case, folder / "savepoint"))
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
        ).stdout.strip()
        about = {
            "lockgate": lg.__version__,
            "commit": commit,
            "case": name,
            "written": time.strftime("%Y-%m-%d", time.gmtime()),
        }
        (folder / "about.json").write_text(json.dumps(about) + "\n")
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
