"""What a file sink published: the records of its ``part-*`` files (JSON lines), hidden
in-progress files excluded, for the exactly-once checks of the job tests."""

from __future__ import annotations

import glob
import json
import os
from typing import Any


def published(folder: str | os.PathLike[str]) -> list[Any]:
    """Every record of the published part files in ``folder``, file by file."""
    out: list[Any] = []
    for path in sorted(glob.glob(os.path.join(os.fspath(folder), "part-*"))):
        with open(path, encoding="utf-8") as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out
