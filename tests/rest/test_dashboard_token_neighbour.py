"""The dashboard's login gives nothing to another port of the same host (issue 37, item 4).

Cookies are scoped to a host, not to a port, and a browser sends them to every port of
127.0.0.1 (SameSite does not help: the same IP is the same site). The login used to set a
cookie holding the job's token, so a page served by another local user on another port
received ``Cookie: lockgate_token=<token>`` and could cancel the job with it. Now the page
keeps the token in its own origin's ``sessionStorage`` and sends it as an
``Authorization`` header; no cookie carries anything.

In real headless Chromium (``scripts/browser.sh``): log in to a running job's dashboard,
then open a page another server serves on a second port of 127.0.0.1, which also fetches
from its own origin with ``credentials: "include"``; that server records what it
receives. It receives no cookie holding the token, its page sees no token in its cookies
or storage, and whatever cookie it received does not authenticate against the job's API
(neither a read nor a cancel)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_jobs import job_id, numbers_job, start, stop
from selenium.webdriver.common.by import By
from test_dashboard_browser import browser_paths, driver, log_in, page_wait  # noqa: F401

import lockgate as lg

NEIGHBOUR_PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>neighbour</title>
</head><body><p id="state">loading</p><script>
fetch("/probe", {credentials: "include", cache: "no-store"}).then(function () {
  document.getElementById("state").textContent = "probed";
});
</script></body></html>"""


class Neighbour:
    """Another local user's web server on a second port of 127.0.0.1: serves a page
    that fetches ``/probe`` from its own origin, and records the headers of every
    request it receives."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()
        neighbour = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with neighbour.lock:
                    neighbour.requests.append((self.path, dict(self.headers.items())))
                body = NEIGHBOUR_PAGE if self.path == "/" else b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if self.path == "/" else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Neighbour:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def received(self) -> list[tuple[str, dict[str, str]]]:
        with self.lock:
            return list(self.requests)


@pytest.fixture
def job(tmp_path: Path) -> Iterator[lg.JobClient]:
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor()))
    yield client
    stop(client)


@pytest.mark.hang_guard(300)
def test_a_page_on_another_port_receives_nothing_that_authenticates(
    driver: Any,  # noqa: F811 - the fixture imported above
    job: lg.JobClient,
) -> None:
    wait = page_wait(driver)
    log_in(driver, wait, job)  # through the dashboard's form, with the job's token
    wait.until(
        lambda d: d.find_element(By.ID, "job-name").text == job.job_name,
        "the dashboard shows the job: its API calls are authenticated",
    )
    assert driver.find_element(By.ID, "login").get_attribute("hidden") is not None
    jid = job_id(job)
    token = job.rest_token
    assert token
    # nothing the browser keeps as a cookie holds the token
    for cookie in driver.get_cookies():
        assert token not in cookie.get("value", ""), cookie

    with Neighbour() as neighbour:
        assert neighbour.url != job.rest_url and neighbour.url.startswith("http://127.0.0.1:")
        driver.get(neighbour.url + "/")
        wait.until(
            lambda d: d.find_element(By.ID, "state").text == "probed",
            "the neighbour's page fetched from its own origin with credentials",
        )
        seen = driver.execute_script(
            "return {cookie: document.cookie, session: JSON.stringify(sessionStorage),"
            " local: JSON.stringify(localStorage)}"
        )
        received = neighbour.received()

    paths = [p for p, _ in received]
    assert "/" in paths and "/probe" in paths, paths
    for kind, text in seen.items():
        assert token not in text, f"the neighbour's page sees the token in its {kind}"
    cookies = {h.get("Cookie", "") for _, h in received}
    for path, headers in received:
        for name, value in headers.items():
            assert token not in value, f"the neighbour received the token in {name} of {path}"
    # whatever cookie the neighbour received (none is expected) does not authenticate
    with httpx.Client(base_url=job.rest_url, timeout=60) as http:
        for cookie in cookies | {""}:
            headers = {"X-Lockgate-Request": "1"}
            if cookie:
                headers["Cookie"] = cookie
            r = http.get("/api/v1/jobs", headers=headers)
            assert r.status_code == 401, (cookie, r.status_code, r.text[:200])
            r = http.post(f"/api/v1/jobs/{jid}/cancel", headers=headers)
            assert r.status_code == 401, (cookie, r.status_code, r.text[:200])
    assert job.running, "nothing the neighbour received cancelled the job"
