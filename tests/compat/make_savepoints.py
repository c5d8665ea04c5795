"""Write this release's savepoints of the compatibility job (run by hand, once per
release, then commit what it wrote):

    .venv/bin/python tests/compat/make_savepoints.py

For each state backend it runs the job of ``compat_job.py`` until a few checkpoints
completed (its source paced by completed checkpoints, so windows and timers are open),
stops it with a savepoint into ``tests/compat/savepoints/<version>/<backend>/``, then
restores that savepoint once and writes what the restored job outputs to
``expected.json`` beside it, after checking that it equals the oracle (what the whole
input gives, computed without lockgate). ``test_compat.py`` restores every savepoint
found there on the code of the day and compares with its ``expected.json``."""

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

import compat_job  # noqa: E402

import lockgate as lg  # noqa: E402
from checkpoint_paced import CheckpointPacedSource  # noqa: E402
from lockgate.checkpoint.export import export_checkpoint  # noqa: E402

BACKENDS = {
    "heap": lambda: lg.HashMapStateBackend(),
    "rocksdb": lambda: lg.RocksDBStateBackend(),
    "rocksdb-incremental": lambda: lg.RocksDBStateBackend(incremental=True),
}
#: backends whose case is a retained checkpoint (exported), not a savepoint: their
#: checkpoints hold the backend's native files
CHECKPOINT_CASES = {"rocksdb-incremental"}
#: records each source subtask emits per completed checkpoint while the savepoint is made
PACE = 1_500
#: completed checkpoints before the savepoint is taken (incremental ones share files)
CHECKPOINTS = 4


def write_savepoint(backend: str, folder: Path) -> None:
    env = compat_job.environment(lg.LocalExecutor())
    env.set_state_backend(BACKENDS[backend]())
    env.enable_checkpointing(100)
    with tempfile.TemporaryDirectory() as tmp:
        env.checkpoint_config.storage = str(Path(tmp) / "chk")
        compat_job.build(env, CheckpointPacedSource(compat_job.bounded_source(), PACE, 10**6))
        if backend in CHECKPOINT_CASES:
            env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
        client = env.execute_async("compat")
        deadline = time.monotonic() + 120
        while len([c for c in client.checkpoints() if c.status == "completed"]) < CHECKPOINTS:
            if time.monotonic() > deadline or client.done():
                raise SystemExit(f"{backend}: {CHECKPOINTS} checkpoints did not complete")
            time.sleep(0.05)
        if backend not in CHECKPOINT_CASES:
            client.stop_with_savepoint(str(folder))
            return
        client.cancel()
        client.wait(120)
        # the newest retained checkpoint, with the shared files it references
        export_checkpoint(env.checkpoint_config.storage, str(folder))


def expected_of(backend: str, folder: Path) -> dict[str, list]:
    env = compat_job.environment(lg.LocalExecutor())
    env.set_state_backend(BACKENDS[backend]())
    compat_job.build(env, compat_job.bounded_source())
    result = env.execute("compat", restore_from=str(folder))
    restored_in = result._metrics("numbers").records_out
    out = compat_job.outputs(result)
    if out != compat_job.oracle():
        raise SystemExit(f"{backend}: the job restored from {folder} does not equal the oracle")
    print(f"{backend}: restored job read {restored_in} of {compat_job.N} records")
    return out


def main() -> None:
    root = HERE / "savepoints" / lg.__version__
    for backend in sys.argv[1:] or BACKENDS:
        folder = root / backend
        if folder.exists():
            shutil.rmtree(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        write_savepoint(backend, folder / "savepoint")
        expected = expected_of(backend, folder / "savepoint")
        (folder / "expected.json").write_text(json.dumps(expected, indent=None) + "\n")
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
        ).stdout.strip()
        about = {
            "lockgate": lg.__version__,
            "commit": commit,
            "backend": backend,
            "written": time.strftime("%Y-%m-%d", time.gmtime()),
        }
        (folder / "about.json").write_text(json.dumps(about) + "\n")
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
