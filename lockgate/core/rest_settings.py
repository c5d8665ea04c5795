"""Where a job's REST API listens and which token it takes, as the process was told.

``ExecutionConfig.rest_bind`` / ``rest_port`` say where a job's REST API listens, and the
token is a new random one per job. A driver started by someone else's tooling (``lockgate run
--rest-bind ... --rest-port ... --rest-token-file ...``, and so ``lockgate submit``, whose
driver runs on a cluster worker nobody logs in to) must be reachable at an address and with a
token known before it starts: these environment variables, when set, override the job's
configuration:

* ``LOCKGATE_REST_BIND``: the address to listen on (e.g. ``0.0.0.0``);
* ``LOCKGATE_REST_PORT``: the port (0: any free one);
* ``LOCKGATE_REST_TOKEN_FILE``: a file holding the token (at least 24 characters, no
  whitespace inside). The file must be private to its owner (no group or other permission
  bits): a token anyone on the machine can read protects nothing.

Guarantees: :func:`rest_settings` either returns settings that pass the same checks as
``ExecutionConfig`` or raises :class:`~lockgate.errors.ConfigurationError` naming the variable,
what is wrong and how to fix it; the token is never part of a message.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass

from ..errors import ConfigurationError

BIND_ENV = "LOCKGATE_REST_BIND"
PORT_ENV = "LOCKGATE_REST_PORT"
TOKEN_FILE_ENV = "LOCKGATE_REST_TOKEN_FILE"
#: the shortest token a token file may hold
MIN_TOKEN_LENGTH = 24
#: the largest token file read (bytes)
MAX_TOKEN_FILE_BYTES = 4096


@dataclass(frozen=True)
class RestSettings:
    """Where to listen and the token every request must carry (``repr`` hides it)."""

    bind: str
    port: int
    token: str

    def __repr__(self) -> str:
        return f"RestSettings(bind={self.bind!r}, port={self.port}, token=<hidden>)"


def parse_port(text: str, what: str) -> int:
    """``text`` as a port 0..65535; raises ``ConfigurationError`` naming ``what``."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigurationError(
            f"{what}: expected a port from 0 (any free one) to 65535, got {text!r}"
        )
    return port


def read_token_file(path: str, what: str) -> str:
    """The token in the file ``path``; raises ``ConfigurationError`` naming ``what`` when
    the file is missing, not private to its owner, too large, or holds no usable token."""
    try:
        info = os.stat(path)
    except OSError as e:
        raise ConfigurationError(f"{what} {path}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigurationError(f"{what} {path}: not a regular file")
    if info.st_mode & 0o077:
        raise ConfigurationError(
            f"{what} {path}: the file is readable or writable by others "
            f"(mode {stat.S_IMODE(info.st_mode):o}); make it private with chmod 600 {path}"
        )
    if info.st_size > MAX_TOKEN_FILE_BYTES:
        raise ConfigurationError(f"{what} {path}: {info.st_size} bytes, more than a token")
    with open(path, encoding="utf-8", errors="strict") as f:
        token = f.read().strip()
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise ConfigurationError(
            f"{what} {path}: the file must hold one token of at least {MIN_TOKEN_LENGTH} "
            "characters without whitespace, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def rest_settings(bind: str, port: int) -> RestSettings:
    """The job's REST settings: ``bind`` and ``port`` from its configuration unless the
    environment (``LOCKGATE_REST_BIND`` / ``_PORT`` / ``_TOKEN_FILE``) says otherwise; a
    new random token unless a token file is given."""
    environ = os.environ
    if environ.get(BIND_ENV, "").strip():
        bind = environ[BIND_ENV].strip()
    if environ.get(PORT_ENV, "").strip():
        port = parse_port(environ[PORT_ENV].strip(), PORT_ENV)
    token_file = environ.get(TOKEN_FILE_ENV, "").strip()
    token = read_token_file(token_file, TOKEN_FILE_ENV) if token_file else None
    return RestSettings(bind, port, token or secrets.token_urlsafe(32))
