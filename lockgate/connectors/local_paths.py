"""The local path a user's path argument names: a plain path or a ``file://`` URL.

On a Spark cluster, where checkpoint storage must be a URL, users give file
connectors URLs too; taken as a plain path, ``file:///data/out`` would be a
folder called ``file:`` under the working directory. :func:`local_path` turns
``file:`` URLs into the path they name and refuses every other URL scheme, so a
path is never written somewhere else than meant (``FileSource`` and ``FileSink`` send
other URLs to ``pyarrow.fs`` first, see :mod:`.file_locations`).
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError

#: ``scheme:/...``: what a URL looks like (a local name with a colon but no slash after
#: it, such as ``events:1.jsonl``, stays a relative path)
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")


def local_path(owner: str, path: object) -> str:
    """The local path that ``path`` (a str or ``os.PathLike``) of ``owner`` names.

    ``file:///abs/path``, ``file://localhost/abs/path`` and ``file:/abs/path`` give
    ``/abs/path`` (percent-escapes decoded); a plain path is returned unchanged. Any
    other URL (``s3://``, ``hdfs://``, ...), a ``file://`` URL naming another host,
    or one with a query or fragment raises :class:`ConfigurationError` saying what
    is supported.
    """
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        text = None
    if not isinstance(text, str) or not text:
        raise ConfigurationError(
            f"{owner} path must be a non-empty str or path (a local path or a file:// URL), "
            f"got {path!r}"
        )
    match = _URL.match(text)
    if match is None:
        if text[:5].lower() == "file:":
            raise ConfigurationError(
                f"{owner} path {text!r} is not an absolute file URL: write "
                "file:///abs/path (three slashes), or give a plain path"
            )
        return text
    scheme = match.group(1).lower()
    if scheme != "file":
        raise ConfigurationError(
            f"{owner} path {text!r}: a local path or file:// URL is expected here; "
            f"{scheme}:// is not supported. Give a local path, e.g. '/data/out' or "
            "'file:///data/out', or a filesystem mounted on every machine that runs the job"
        )
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        raise ConfigurationError(
            f"{owner} path {text!r} names host {parts.netloc!r}: a file:// URL names a path "
            "on this machine, as file:///abs/path (three slashes); to read another host's "
            "files, mount them and give the local path"
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(
            f"{owner} path {text!r} has a query or fragment ('?' or '#'): a file:// URL "
            "names a path only; percent-encode those characters in file names (%3F, %23)"
        )
    return unquote(parts.path)
