"""Hostile checkpoint storage (issue 18 item 6): a tampered checkpoint is refused.

A checkpoint is code: its state files are pickles. With
``checkpoint_config.signing_key`` set, every file carries an HMAC-SHA256 and a restore
refuses what someone without the key wrote. :func:`tampered_checkpoint` checks it on a
real job: a signed job (``LocalExecutor``, next to whatever else runs) takes
checkpoints; the attacker, who can write the storage but has no key, replaces a state
file of the newest checkpoint with a pickle that creates a file when unpickled and
rewrites ``_metadata`` to match (sizes, CRC32) - once unsigned, once signed with a key
of their own. Both restores must fail before anything is unpickled (no file created),
and the genuine checkpoint must still restore.

It is a case of ``bench/hostile.py`` (``--cases tampered_checkpoint``) and runs on its
own too, printing one JSON line::

    python bench/hostile_checkpoints.py
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
import zlib
from typing import Any

import lockgate as lg
from lockgate.checkpoint.fs_storage import KIND_JSON, KIND_PICKLE, decode_file, encode_file
from lockgate.checkpoint.storage_options import StorageOptions
from lockgate.connectors import DiscardingSink, SequenceSource

KEY = os.urandom(32)


class _Tripwire:
    """Unpickling it creates ``path``: proof that a payload was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


def _key_of(x: int) -> int:
    return x % 16


class _Sum(lg.KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value: int, ctx: Any) -> Any:
        self.total.update(self.total.value() + value)
        yield value


def _env(storage: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = storage
    env.checkpoint_config.signing_key = KEY
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
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


def _signed_checkpoint(storage: str, timeout_s: float = 60) -> str:
    """Run the signed job until it completed two checkpoints; the newest one's folder."""
    client = _env(storage).execute_async("signed neighbour")
    deadline = time.monotonic() + timeout_s
    try:
        while len([c for c in client.checkpoints() if c.status == "completed"]) < 2:
            if time.monotonic() > deadline or client.done():
                raise RuntimeError("the signed job did not complete two checkpoints")
            _pause(0.05)  # bounded polling: the deadline above
    finally:
        client.cancel()
        client.wait(60)
    newest = max(
        glob.glob(os.path.join(storage, "chk-*", "_metadata")),
        key=lambda p: int(p.split(os.sep)[-2][4:]),
    )
    return os.path.dirname(newest)


def _pause(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)


def _tamper(folder: str, marker: str, attacker_key: bytes | None) -> None:
    """Replace a state file of ``folder`` with a tripwire pickle and rewrite
    ``_metadata`` to match, unsigned or signed with ``attacker_key``."""
    options = StorageOptions(signing_key=attacker_key) if attacker_key else None
    victim = min(glob.glob(os.path.join(folder, "op-sums-*")))
    payload = pickle.dumps(_Tripwire(marker))
    data = encode_file(payload, KIND_PICKLE, options)
    with open(victim, "wb") as f:
        f.write(data)
    meta_path = os.path.join(folder, "_metadata")
    with open(meta_path, "rb") as f:
        metadata = json.loads(decode_file(f.read(), KIND_JSON, meta_path)[0])
    name = os.path.basename(victim)
    for by_subtask in metadata["operators"].values():
        for handle in by_subtask.values():
            if handle["path"].endswith(name):
                handle.update(size=len(data), checksum=zlib.crc32(payload))
    with open(meta_path, "wb") as f:
        f.write(encode_file(json.dumps(metadata).encode(), KIND_JSON, options))


def tampered_checkpoint(target: Any = None) -> dict[str, Any]:
    """The case (``target``, the job of ``bench/hostile.py``, is not needed: the signed
    job runs next to it). JSON fields: ``ok`` and what each restore did."""
    work = tempfile.mkdtemp(prefix="lockgate-hostile-checkpoints-")
    try:
        storage = os.path.join(work, "checkpoints")
        newest = _signed_checkpoint(storage)
        result: dict[str, Any] = {}
        for attack, attacker_key in (("unsigned", None), ("other_key", os.urandom(32))):
            copy = os.path.join(work, attack)
            shutil.copytree(storage, copy)
            marker = os.path.join(work, f"{attack}-unpickled")
            folder = os.path.join(copy, os.path.basename(newest))
            _tamper(folder, marker, attacker_key)
            try:
                _env(copy).get_execution_plan("restore", restore_from=folder)
                refused = "restored"
            except lg.RestoreError as e:
                refused = (
                    "refused"
                    if "signing key" in str(e) or "not signed" in str(e)
                    else f"refused for another reason: {e}"
                )
            result[attack] = refused
            result[f"{attack}_unpickled"] = os.path.exists(marker)
        try:
            _env(storage).get_execution_plan("restore", restore_from=newest)
            result["genuine"] = "restorable"
        except lg.RestoreError as e:
            result["genuine"] = f"refused: {e}"
        result["ok"] = (
            result["unsigned"] == result["other_key"] == "refused"
            and not result["unsigned_unpickled"]
            and not result["other_key_unpickled"]
            and result["genuine"] == "restorable"
        )
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    line = {"case": "tampered_checkpoint", **tampered_checkpoint()}
    print(json.dumps(line, default=str), flush=True)
    sys.exit(0 if line["ok"] else 1)
