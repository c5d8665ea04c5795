"""A local S3 for tests: a moto server in a subprocess.

* :func:`start_moto_server` starts moto's server (``tests/moto_atomic_server.py``: moto
  with conditional writes made atomic, as a real object store's are) on
  ``127.0.0.1:<free port>``,
  waits until its HTTP port answers (bounded polling, no fixed sleeps; a clear failure
  with the server's log otherwise) and returns a :class:`MotoServer`; ``stop()`` ends it.
* :meth:`MotoServer.url` builds the storage URL lockgate (``pyarrow.fs``) opens::

      s3://<bucket>/<path>?endpoint_override=127.0.0.1:<port>&scheme=http&region=us-east-1

  ``with_credentials=True`` puts the dummy credentials into the URL
  (``s3://testing:testing@<bucket>/...``): a self-contained URL for processes that do
  not see the test's environment (Spark Python workers started earlier).
* Fixtures (import them into a test module or a ``conftest.py``): ``moto_server``
  (session scope: one server, dummy AWS credentials in the environment while it runs,
  a bucket named :data:`BUCKET`) and ``s3_url`` (a fresh prefix per test).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

HOST = "127.0.0.1"
REGION = "us-east-1"
BUCKET = "lockgate-test"
#: dummy credentials moto accepts (it does not check signatures)
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


class MotoServer:
    """A running moto server (see the module docstring)."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, log_path: str, bucket: str | None = None
    ) -> None:
        self.process = process
        #: the bucket :func:`start_moto_server` created (the default of :meth:`url`)
        self.bucket = bucket
        self.host = HOST
        self.port = port
        self.log_path = log_path

    @property
    def endpoint(self) -> str:
        """``host:port``, the value of pyarrow's ``endpoint_override``."""
        return f"{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.endpoint}"

    def url(
        self, bucket: str | None = None, path: str = "", *, with_credentials: bool = False
    ) -> str:
        """The ``s3://`` URL of ``bucket/path`` on this server (``bucket`` defaults to the one
        :func:`start_moto_server` created)."""
        bucket = bucket or self.bucket
        if not bucket:
            raise ValueError("no bucket: pass one (this server was started without a bucket)")
        user = (
            (
                f"{DUMMY_CREDENTIALS['AWS_ACCESS_KEY_ID']}:"
                f"{DUMMY_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}@"
            )
            if with_credentials
            else ""
        )
        key = "/" + path.strip("/") if path.strip("/") else ""
        return (
            f"s3://{user}{bucket}{key}?endpoint_override={self.endpoint}"
            f"&scheme=http&region={REGION}"
        )

    def filesystem(self) -> Any:
        """A ``pyarrow.fs.S3FileSystem`` on this server (may create buckets)."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region=REGION,
            endpoint_override=self.endpoint,
            scheme="http",
            allow_bucket_creation=True,
        )

    def create_bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        """End the server (terminate, then kill after 10 s) and remove its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def _answers(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(http_url + "/moto-api/", timeout=1.0) as response:
            response.read()
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False


#: moto's server with atomic conditional writes (see that module)
SERVER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moto_atomic_server.py")


def start_moto_server(
    bucket: str | None = BUCKET, timeout_s: float = 30.0, env: dict[str, str] | None = None
) -> MotoServer:
    """Start a moto server on a free local port, wait until it answers HTTP and create
    ``bucket`` (``None``: none); ``env`` adds to the server's environment. Raises
    ``RuntimeError`` with the server's log if it does not come up within ``timeout_s``."""
    pause = threading.Event()
    last_error = ""
    for _attempt in range(3):  # a free port can be taken between probing and binding
        port = _free_port()
        fd, log_path = tempfile.mkstemp(prefix="moto-server-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, SERVER_SCRIPT, "-H", HOST, "-p", str(port)],
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = MotoServer(process, port, log_path, bucket)
        deadline = time.monotonic() + timeout_s
        while process.poll() is None and not _answers(server.http_url):
            if time.monotonic() > deadline:
                log_text = server.log()
                server.stop()
                raise RuntimeError(
                    f"moto server on {server.endpoint} did not answer HTTP within {timeout_s}s; "
                    f"its output:\n{log_text}"
                )
            pause.wait(0.05)
        if process.poll() is None:
            if bucket is not None:
                try:
                    server.create_bucket(bucket)
                except BaseException:
                    server.stop()
                    raise
            return server
        last_error = server.log()
        server.stop()
    raise RuntimeError(
        f"moto server exited at start (exit code {process.returncode}); its output:\n{last_error}"
    )


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One moto server for the session, with bucket :data:`BUCKET`; dummy AWS credentials
    are in the environment while it runs."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in DUMMY_CREDENTIALS.items():
            mp.setenv(name, value)
        server = start_moto_server()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def s3_url(moto_server: MotoServer) -> str:
    """A fresh, empty ``s3://`` location on the session's moto server."""
    return moto_server.url(path=f"test-{uuid.uuid4().hex[:12]}")
