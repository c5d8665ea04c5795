"""Hostile local users against a job's REST API (issue 37, items 4-6).

Three cases, each on a real job (``LocalExecutor``, next to whatever else runs):

* :func:`cookie_on_second_port`: in real headless Chromium (``scripts/browser.sh``), log in
  to the job's dashboard, then open a page another local user serves on a second port of
  127.0.0.1 that also fetches from its own origin with credentials. Cookies go to every
  port of a host; the neighbour must receive nothing holding the token, and nothing it
  received may authenticate (a read, a cancel) against the job's API.
* :func:`sustained_slow_heads`: 300 connections sending unfinished request heads (more
  than ``MAX_WAITING``), each reopened as soon as the server closes it, for 15 s (longer
  than the head timeout); requests with the token made all along must all be answered
  200, each within 10 s.
* :func:`planted_token_file`: another user (uid 65534) plants a 0600 token file in a
  sticky shared folder, and a symlink of theirs to the victim's own file; a job started
  with either as ``LOCKGATE_REST_TOKEN_FILE`` (what ``--rest-token-file`` sets) must refuse
  to start, and one with the user's own file must serve with it. Giving a file to another
  user needs root: without it the case reports that it could not run (``ok`` false).

They are cases of ``bench/hostile.py`` (``--cases cookie_on_second_port`` ...) and run on
their own too, printing one JSON line per case (exit status 1 when one is not ``ok``)::

    python bench/hostile_rest.py [CASE ...]
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.core import rest_settings
from lockgate.errors import ConfigurationError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the other local user of the planted-file case
OTHER_UID = 65534


def _env() -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.config.progress_interval_ms = 0
    (
        env.from_source(
            SequenceSource(0, 10**9, batch_size=100, rows_per_second=2_000, bounded=False),
            name="numbers",
        )
        .uid("numbers")
        .sink_to(DiscardingSink())
        .uid("out")
    )
    return env


def _wait_for(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not check():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.05)
    return True


@contextmanager
def _job(name: str) -> Iterator[lg.JobClient]:
    client = _env().execute_async(name)
    try:
        if not _wait_for(lambda: client.status() == "RUNNING", 120):
            raise RuntimeError(f"the job did not start: {client.status()}")
        yield client
    finally:
        client.cancel()
        try:
            client.wait(120)
        except lg.JobFailedError:
            pass


def _job_id(client: lg.JobClient) -> str:
    headers = {"Authorization": f"Bearer {client.rest_token}"}
    with httpx.Client(base_url=client.rest_url or "", headers=headers, timeout=30) as http:
        return str(http.get("/api/v1/jobs").json()["jobs"][0]["id"])


# -- cookie on a second port --------------------------------------------------------------

_NEIGHBOUR_PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>n</title>
</head><body><p id="state">loading</p><script>
fetch("/probe", {credentials: "include", cache: "no-store"}).then(function () {
  document.getElementById("state").textContent = "probed";
});
</script></body></html>"""


def _neighbour() -> tuple[ThreadingHTTPServer, list[dict[str, str]]]:
    received: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.append({"path": self.path, **dict(self.headers.items())})
            body = _NEIGHBOUR_PAGE if self.path == "/" else b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler), received


def _browser(profile: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    done = subprocess.run(
        ["bash", os.path.join(REPO, "scripts", "browser.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/browser.sh failed: {done.stdout}{done.stderr}")
    paths = dict(l.split("=", 1) for l in done.stdout.splitlines() if l.startswith("chrom"))  # noqa: E741
    options = webdriver.ChromeOptions()
    options.binary_location = paths["chromium"]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={profile}")
    browser = webdriver.Chrome(service=Service(paths["chromedriver"]), options=options)
    browser.set_page_load_timeout(30)
    return browser


def cookie_on_second_port(target: Any = None) -> dict[str, Any]:
    """The case (``target`` is not needed: the job runs next to it). JSON fields: ``ok``,
    whether the neighbour received the token, whether what it received authenticates."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    work = tempfile.mkdtemp(prefix="lockgate-hostile-rest-")
    browser = _browser(os.path.join(work, "profile"))
    server, received = _neighbour()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with _job("hostile rest cookie") as client:
            token = client.rest_token or ""
            wait = WebDriverWait(browser, 60, poll_frequency=0.2)
            browser.get(f"{client.rest_url}/")
            field = wait.until(ec.visibility_of_element_located((By.NAME, "token")))
            field.send_keys(token)
            field.submit()
            wait.until(lambda d: d.find_element(By.ID, "job-name").text == client.job_name)
            browser_cookies = browser.get_cookies()
            neighbour = f"http://127.0.0.1:{server.server_address[1]}"
            browser.get(neighbour + "/")
            wait.until(lambda d: d.find_element(By.ID, "state").text == "probed")
            seen = browser.execute_script(
                "return document.cookie + JSON.stringify(sessionStorage)"
                " + JSON.stringify(localStorage)"
            )
            got_token = any(token in v for r in received for v in r.values())
            cookies = {r.get("Cookie", "") for r in received} - {""}
            jid = _job_id(client)
            statuses = []
            with httpx.Client(base_url=client.rest_url or "", timeout=30) as http:
                for cookie in cookies | {""}:
                    headers = {"X-Lockgate-Request": "1", **({"Cookie": cookie} if cookie else {})}
                    statuses.append(http.get("/api/v1/jobs", headers=headers).status_code)
                    statuses.append(
                        http.post(f"/api/v1/jobs/{jid}/cancel", headers=headers).status_code
                    )
            running = client.running
        result = {
            "neighbour_requests": len(received),
            "neighbour_cookies": len(cookies),
            "neighbour_received_token": got_token,
            "neighbour_page_sees_token": token in seen,
            "browser_cookie_holds_token": any(token in c.get("value", "") for c in browser_cookies),
            "replayed_statuses": sorted(set(statuses)),
            "job_running_after": running,
        }
        result["ok"] = (
            len(received) >= 2
            and not got_token
            and not result["neighbour_page_sees_token"]
            and not result["browser_cookie_holds_token"]
            and set(statuses) == {401}
            and running
        )
        return result
    finally:
        browser.quit()
        server.shutdown()
        server.server_close()
        shutil.rmtree(work, ignore_errors=True)


# -- sustained slow heads -----------------------------------------------------------------


def sustained_slow_heads(
    target: Any = None, connections: int = 300, duration_s: float = 15.0
) -> dict[str, Any]:
    """The case. JSON fields: ``ok``, the requests with the token made during the attack,
    their statuses and slowest answer, how often the slow connections were reopened."""
    from lockgate.rest import server as rest_server

    with _job("hostile rest slow heads") as client:
        host, port = (client.rest_url or "").removeprefix("http://").rsplit(":", 1)
        address = (host, int(port))
        head = b"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        stop = threading.Event()
        counts = {"opened": 0, "reopened": 0, "failed_opens": 0}
        selector = selectors.DefaultSelector()

        def open_one() -> None:
            try:
                sock = socket.create_connection(address, timeout=10)
                sock.sendall(head)
            except OSError:
                counts["failed_opens"] += 1
                return
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
            counts["opened"] += 1

        def attack() -> None:
            for _ in range(connections):
                open_one()
            while not stop.is_set():
                for key, _ in selector.select(timeout=0.1):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(4096)
                    except OSError:
                        data = b""
                    if data:
                        continue
                    selector.unregister(sock)
                    sock.close()
                    if not stop.is_set():
                        open_one()
                        counts["reopened"] += 1
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]

        attacker = threading.Thread(target=attack, name="slow heads", daemon=True)
        attacker.start()
        statuses: dict[str, int] = {}
        slowest = 0.0
        headers = {"Authorization": f"Bearer {client.rest_token}"}
        deadline = time.monotonic() + duration_s
        pause = threading.Event()
        try:
            _wait_for(lambda: counts["opened"] >= connections // 2, 60)
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    with httpx.Client(base_url=client.rest_url or "", headers=headers) as http:
                        status = str(http.get("/api/v1/jobs", timeout=10).status_code)
                except httpx.HTTPError as e:
                    status = type(e).__name__
                slowest = max(slowest, time.monotonic() - started)
                statuses[status] = statuses.get(status, 0) + 1
                pause.wait(0.2)
        finally:
            stop.set()
            attacker.join(30)
        running = client.running
    answered = statuses.get("200", 0)
    return {
        "slow_connections": connections,
        "max_waiting": rest_server.MAX_WAITING,
        "seconds": duration_s,
        "reopened": counts["reopened"],
        "requests": sum(statuses.values()),
        "statuses": statuses,
        "slowest_answer_s": round(slowest, 3),
        "job_running_after": running,
        "ok": answered == sum(statuses.values()) > 0 and slowest < 10 and running,
    }


# -- planted token file -------------------------------------------------------------------


def _starts_with(path: str) -> str:
    """What a job does with ``LOCKGATE_REST_TOKEN_FILE=path``: "refused: ..." or "served"."""
    old = os.environ.get(rest_settings.TOKEN_FILE_ENV)
    os.environ[rest_settings.TOKEN_FILE_ENV] = path
    try:
        try:
            with _job("hostile rest token file") as client:
                return "served" if client.rest_token else "no REST API"
        except ConfigurationError as e:
            return f"refused: {e}"
    finally:
        if old is None:
            os.environ.pop(rest_settings.TOKEN_FILE_ENV, None)
        else:
            os.environ[rest_settings.TOKEN_FILE_ENV] = old


def planted_token_file(target: Any = None) -> dict[str, Any]:
    """The case. JSON fields: ``ok`` and what a job did with each file."""
    if os.geteuid() != 0:
        return {"ok": False, "error": "needs root to give a file to another user (os.chown)"}
    shared = tempfile.mkdtemp(prefix="lockgate-hostile-shared-")
    mine = tempfile.mkdtemp(prefix="lockgate-hostile-mine-")
    try:
        os.chmod(shared, 0o1777)  # a sticky folder everyone writes, like /tmp
        planted = os.path.join(shared, "token")
        own = os.path.join(mine, "token")
        for path in (planted, own):
            with open(path, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
            os.chmod(path, 0o600)
        os.chown(planted, OTHER_UID, OTHER_UID)  # the planter knows this token
        link = os.path.join(shared, "link")
        os.symlink(own, link)
        os.lchown(link, OTHER_UID, OTHER_UID)  # the planter picks what it points to
        result = {
            "planted_file": _starts_with(planted),
            "foreign_symlink": _starts_with(link),
            "own_file": _starts_with(own),
        }
        result["ok"] = (
            result["planted_file"].startswith("refused:")
            and f"uid {OTHER_UID}" in result["planted_file"]
            and result["foreign_symlink"].startswith("refused:")
            and "symlink" in result["foreign_symlink"]
            and result["own_file"] == "served"
        )
        return result
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(mine, ignore_errors=True)


CASES: dict[str, Callable[..., dict[str, Any]]] = {
    "cookie_on_second_port": cookie_on_second_port,
    "sustained_slow_heads": sustained_slow_heads,
    "planted_token_file": planted_token_file,
}


if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    all_ok = True
    for name in names:
        try:
            line = {"case": name, **CASES[name]()}
        except Exception as e:  # noqa: BLE001 - reported as the case's outcome
            line = {"case": name, "ok": False, "error": f"{type(e).__name__}: {e}"}
        all_ok = all_ok and bool(line["ok"])
        print(json.dumps(line, default=str), flush=True)
    sys.exit(0 if all_ok else 1)
