"""Export of an unsigned checkpoint (issue 37 item 8): nothing in it is unpickled.

``lockgate checkpoint export CHK DEST`` promises to only read its source, so exporting a
checkpoint someone else wrote must run none of their code. :func:`unsigned_export`
checks it on a real job: an unsigned job on the incremental RocksDB backend
(``LocalExecutor``, next to whatever else runs) takes checkpoints; the attacker, who can
write the storage, replaces the state file of the newest checkpoint that references
shared files (the one an export used to unpickle and rewrite) with a pickle that creates
a file when unpickled, and rewrites ``_metadata`` to match (size, CRC32). The export of
that checkpoint, through the command line, must create no file; the genuine checkpoint
must still export, and its export must still plan a restore (every state and shared file
read and checked).

It is a case of ``bench/hostile.py`` (``--cases unsigned_export``) and runs on its own
too, printing one JSON line::

    python bench/hostile_export.py
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import zlib
from typing import Any

# the tripwire and the keyed job of the tampering case (bench/ is on the path when this
# file runs)
from hostile_checkpoints import _key_of, _Sum, _Tripwire

import lockgate as lg
from lockgate import cli
from lockgate.checkpoint.fs_storage import KIND_JSON, KIND_PICKLE, decode_file, encode_file
from lockgate.connectors import DiscardingSink, SequenceSource


def _env(storage: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = storage
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    env.set_state_backend(lg.RocksDBStateBackend(incremental=True))
    (
        env.from_source(SequenceSource(0, 10**12, rows_per_second=20_000, batch_size=100))
        .uid("numbers")
        .key_by(_key_of)
        .process(_Sum())
        .uid("sums")
        .sink_to(DiscardingSink())
        .uid("sink")
    )
    return env


def _unsigned_checkpoint(storage: str, timeout_s: float = 60) -> str:
    """Run the unsigned job until it completed two checkpoints; the newest one's folder."""
    client = _env(storage).execute_async("unsigned neighbour")
    deadline = time.monotonic() + timeout_s
    try:
        while len([c for c in client.checkpoints() if c.status == "completed"]) < 2:
            if time.monotonic() > deadline or client.done():
                raise RuntimeError("the unsigned job did not complete two checkpoints")
            threading.Event().wait(0.05)  # bounded polling: the deadline above
    finally:
        client.cancel()
        client.wait(60)
    newest = max(
        glob.glob(os.path.join(storage, "chk-*", "_metadata")),
        key=lambda p: int(p.split(os.sep)[-2][4:]),
    )
    return os.path.dirname(newest)


def _plant(folder: str, marker: str) -> str:
    """Replace a state file of ``folder`` that references shared files with a tripwire
    pickle and rewrite ``_metadata`` (unsigned) to match; the file's name."""
    meta_path = os.path.join(folder, "_metadata")
    with open(meta_path, "rb") as f:
        metadata = json.loads(decode_file(f.read(), KIND_JSON, meta_path)[0])
    victims = [
        handle
        for uid, by_subtask in metadata["operators"].items()
        if uid == "sums"
        for handle in by_subtask.values()
        if handle.get("shared")
    ]
    if not victims:
        raise RuntimeError(f"{folder}: no state file references shared files")
    handle = victims[0]
    payload = pickle.dumps(_Tripwire(marker))
    data = encode_file(payload, KIND_PICKLE)
    with open(os.path.join(os.path.dirname(folder), handle["path"]), "wb") as f:
        f.write(data)
    handle.update(size=len(data), checksum=zlib.crc32(payload))
    with open(meta_path, "wb") as f:
        f.write(encode_file(json.dumps(metadata).encode(), KIND_JSON))
    return str(handle["path"])


def _export(source: str, dest: str) -> tuple[int, str]:
    """``lockgate checkpoint export SOURCE DEST``: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["checkpoint", "export", source, dest])
    return rc, (out.getvalue() + err.getvalue()).strip()


def unsigned_export(target: Any = None) -> dict[str, Any]:
    """The case (``target``, the job of ``bench/hostile.py``, is not needed: the unsigned
    job runs next to it). JSON fields: ``ok`` and what each export did."""
    work = tempfile.mkdtemp(prefix="lockgate-hostile-export-")
    try:
        storage = os.path.join(work, "checkpoints")
        newest = _unsigned_checkpoint(storage)
        copy = os.path.join(work, "planted")
        shutil.copytree(storage, copy)
        marker = os.path.join(work, "unpickled")
        folder = os.path.join(copy, os.path.basename(newest))
        result: dict[str, Any] = {"planted_in": _plant(folder, marker)}
        rc, said = _export(folder, os.path.join(work, "export-planted"))
        result["planted_export"] = "exported" if rc == 0 else f"failed ({rc}): {said}"
        result["unpickled"] = os.path.exists(marker)
        rc, said = _export(newest, os.path.join(work, "export-genuine"))
        result["genuine_export"] = "exported" if rc == 0 else f"failed ({rc}): {said}"
        if rc == 0:
            try:
                _env(os.path.join(work, "checkpoints-2")).get_execution_plan(
                    "restore", restore_from=os.path.join(work, "export-genuine")
                )
                result["genuine_restore"] = "restorable"
            except lg.RestoreError as e:
                result["genuine_restore"] = f"refused: {e}"
        result["ok"] = (
            not result["unpickled"]
            and result["genuine_export"] == "exported"
            and result.get("genuine_restore") == "restorable"
        )
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    line = {"case": "unsigned_export", **unsigned_export()}
    print(json.dumps(line, default=str), flush=True)
    sys.exit(0 if line["ok"] else 1)
