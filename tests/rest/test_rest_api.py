"""The job's REST API on the driver (issue 21, item 2), against real jobs on the local
executor: every route needs the token (401 and nothing else without it, for every
route the app has, but the dashboard's page and files), the token is compared in constant
time, no cookie authenticates (issue 37, item 4), each endpoint answers what the contract
says, bad input gets 400 saying what is wrong, savepoint / stop / cancel work, the
server binds 127.0.0.1 by default, its socket is bounded, and the token is stored in
the registry entry (0600) and printed nowhere."""

from __future__ import annotations

import hmac
import json
import logging
import os
import socket
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_jobs import api, job_id, numbers_job, start, stop
from starlette.routing import Mount, Route

import lockgate as lg
import lockgate.rest.server as rest_server
from conftest import wait_until
from lockgate.checkpoint.storage import METADATA
from lockgate.executor.job_registry import JobInfo, find_job
from lockgate.rest import MAX_BODY_BYTES, TOKEN_COOKIE


@pytest.fixture
def job(tmp_path: Path) -> Any:
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor()))
    yield client
    stop(client)


def concrete_requests(client: lg.JobClient) -> list[tuple[str, str]]:
    """(method, path) for every route of the job's app, with the job id filled in."""
    app = client._rest.app  # type: ignore[attr-defined]
    jid = job_id(client)
    out = []
    for route in app.routes:
        if isinstance(route, Route):
            path = route.path.replace("{id}", jid)
            out.extend((m, path) for m in sorted(route.methods or ()))
        elif isinstance(route, Mount):
            out.extend([("GET", f"{route.path}/index.html"), ("GET", f"{route.path}/nothing")])
        else:
            pytest.fail(f"the app has a route of an unknown kind: {route!r}")
    return out


def test_every_route_answers_401_and_nothing_else_without_the_right_token(
    job: lg.JobClient,
) -> None:
    requests = concrete_requests(job)
    # the routes the contract names are all there (a new one is covered by the loop)
    paths = {p for _, p in requests}
    jid = job_id(job)
    for suffix in ("", "/metrics", "/checkpoints", "/watermarks", "/exceptions", "/progress"):
        assert f"/api/v1/jobs/{jid}{suffix}" in paths
    for suffix in ("savepoints", "stop", "cancel"):
        assert ("POST", f"/api/v1/jobs/{jid}/{suffix}") in requests
    assert {"/", "/openapi.json", "/metrics", "/api/v1/jobs"} <= paths
    assert "/login" not in paths, "no login route: nothing sets a cookie"
    requests.append(("POST", "/login"))
    wrong = job.rest_token[:-2] + ("aa" if not job.rest_token.endswith("aa") else "bb")
    attempts = {
        "missing": api(job, token=None),
        "wrong bearer": api(job, token=wrong),
        "not bearer": api(job, token=None, headers={"Authorization": f"Basic {job.rest_token}"}),
        "right token as a cookie": api(
            job,
            token=None,
            cookies={TOKEN_COOKIE: job.rest_token},
            headers={"X-Lockgate-Request": "1"},
        ),
    }
    body = {"path": "/nonexistent/should-never-be-written", "timeout": 1}
    for kind, http in attempts.items():
        with http:
            for method, path in requests:
                r = http.request(method, path, json=body if method == "POST" else None)
                where = f"{method} {path} with a {kind} token"
                if method in ("GET", "HEAD") and (path == "/" or path.startswith("/static/")):
                    # the dashboard's page and files: the same for every job, no job data
                    assert r.status_code in (200, 404), f"{where}: {r.status_code}"
                    if method != "HEAD":
                        assert job.job_name not in r.text and jid not in r.text, where
                        assert job.rest_token not in r.text, where
                    continue
                assert r.status_code == 401, f"{where}: {r.status_code} {r.text[:200]}"
                assert "set-cookie" not in r.headers, where
                assert r.headers["connection"] == "close", where
                if method != "HEAD":
                    assert r.json() == {"error": "unauthorized"}, where
    assert job.running  # no cancel got through


def test_the_token_is_compared_in_constant_time(
    job: lg.JobClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    token = job.rest_token.encode()
    with api(job) as http:
        assert http.get("/api/v1/jobs").status_code == 200
    assert (token, token) in calls
    calls.clear()
    with api(job, token="x" * 43) as http:
        assert http.get("/api/v1/jobs").status_code == 401
    assert (b"x" * 43, token) in calls


def test_no_cookie_authenticates_and_the_page_expires_the_old_login_cookie(
    job: lg.JobClient,
) -> None:
    """Issue 37, item 4: a cookie reaches every port of the host, so none may hold or
    stand for the token. The token as the old login cookie authenticates nothing (with
    X-Lockgate-Request too), and the dashboard's page expires that cookie where a browser
    still has it from an earlier version."""
    jid = job_id(job)
    cookies = {TOKEN_COOKIE: job.rest_token}
    with api(job, token=None, cookies=cookies, headers={"X-Lockgate-Request": "1"}) as http:
        assert http.get("/api/v1/jobs").status_code == 401
        assert http.post(f"/api/v1/jobs/{jid}/cancel").status_code == 401
        r = http.post("/login", data={"token": job.rest_token})
        assert r.status_code == 401 and "set-cookie" not in r.headers
        page = http.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        expired = page.headers["set-cookie"].lower()
        assert expired.startswith(f"{TOKEN_COOKIE}=") and "max-age=0" in expired, expired
        assert job.rest_token.lower() not in expired
    with api(job, token=None) as http:
        page = http.get("/")
        assert page.status_code == 200 and "set-cookie" not in page.headers
        assert 'id="login-form"' in page.text  # the page asks for the token itself
    assert job.running
    with api(job) as http:  # the header is the way in
        assert http.get("/api/v1/jobs").json()["jobs"][0]["name"] == job.job_name


def test_the_read_endpoints_answer_what_the_contract_says(job: lg.JobClient) -> None:
    wait_until(
        lambda: any(c.status == "completed" for c in job.checkpoints()),
        "a checkpoint completed",
        60,
    )
    jid = job_id(job)
    with api(job) as http:
        jobs = http.get("/api/v1/jobs").json()["jobs"]
        assert jobs == [
            {"id": jid, "name": "rest job", "status": "RUNNING", "started_at": job.started_at}
        ]
        detail = http.get(f"/api/v1/jobs/{jid}").json()
        assert detail["id"] == jid and detail["status"] == "RUNNING"
        assert detail["uptime_s"] > 0 and detail["restarts"] == 0
        assert detail["graph"] == job.graph()
        names = [v["name"] for v in detail["graph"]["vertices"]]
        assert names[0].startswith("numbers") and names[-1] == "out"

        def rated() -> bool:
            m = http.get(f"/api/v1/jobs/{jid}/metrics").json()
            return all(v["busy_ms_per_s"] is not None for v in m["vertices"])

        wait_until(rated, "the metrics have rates", 30)
        metrics = http.get(f"/api/v1/jobs/{jid}/metrics").json()
        assert metrics["job"]["name"] == "rest job" and metrics["job"]["status"] == "RUNNING"
        assert {o["uid"] for o in metrics["operators"]} == {"numbers", "plus-one", "out"}
        assert len(metrics["vertices"]) == 2 and metrics["vertices"][0]["records_out"] > 0

        checkpoints = http.get(f"/api/v1/jobs/{jid}/checkpoints").json()["checkpoints"]
        assert any(c["status"] == "completed" and c["state_size"] > 0 for c in checkpoints)
        assert [c["checkpoint_id"] for c in checkpoints] == sorted(
            c["checkpoint_id"] for c in checkpoints
        )

        watermarks = http.get(f"/api/v1/jobs/{jid}/watermarks").json()["watermarks"]
        assert {w["uid"] for w in watermarks} == {"numbers", "plus-one", "out"}
        assert set(watermarks[0]) == {"operator", "uid", "subtask", "watermark", "held_back_by"}

        assert http.get(f"/api/v1/jobs/{jid}/exceptions").json() == {"exceptions": []}
        progress = http.get(f"/api/v1/jobs/{jid}/progress").json()
        assert progress["job"] == "rest job" and progress["last_checkpoint"]["id"] >= 1

        document = http.get("/openapi.json").json()
        assert document["openapi"].startswith("3.")
        assert "/api/v1/jobs/{id}/savepoints" in document["paths"]

        # only this job's id exists; unknown routes and methods are JSON errors
        for path in ("/api/v1/jobs/nope", "/api/v1/jobs/nope/metrics"):
            r = http.get(path)
            assert r.status_code == 404 and jid in r.json()["error"]
        r = http.post("/api/v1/jobs/nope/cancel")
        assert r.status_code == 404
        r = http.get("/api/v2/whatever")
        assert r.status_code == 404 and "openapi.json" in r.json()["error"]
        r = http.delete(f"/api/v1/jobs/{jid}")
        assert r.status_code == 405 and "DELETE" in r.json()["error"]
        r = http.get("/static/nothing-here.js")
        assert r.status_code == 404
        # every answer carries the security headers
        assert r.headers["cache-control"] == "no-store"
        assert r.headers["x-frame-options"] == "DENY"
    assert job.running


def test_bad_savepoint_and_stop_requests_get_400_saying_what_is_wrong(
    job: lg.JobClient, tmp_path: Path
) -> None:
    jid = job_id(job)
    cases: list[tuple[str, Any, str]] = [
        ("savepoints", b"", "needs a JSON object"),
        ("savepoints", b"{not json", "not valid JSON"),
        ("savepoints", b"[1, 2]", "must be a JSON object"),
        ("savepoints", {"timeout": 5}, "'path' must be the savepoint folder"),
        ("savepoints", {"path": ""}, "'path' must be the savepoint folder"),
        ("savepoints", {"path": 7}, "'path' must be the savepoint folder"),
        ("savepoints", {"path": str(tmp_path / "a"), "timeout": -1}, "'timeout' must be"),
        ("savepoints", {"path": str(tmp_path / "a"), "timeout": True}, "'timeout' must be"),
        ("savepoints", {"path": str(tmp_path / "a"), "timeout": "5"}, "'timeout' must be"),
        ("savepoints", {"path": str(tmp_path / "a"), "timeout": 1e308}, "<= 86400"),
        ("savepoints", {"path": str(tmp_path / "a"), "drain": True}, "unknown field(s) 'drain'"),
        ("stop", {"path": str(tmp_path / "a"), "drain": "yes"}, "'drain' must be true or false"),
        ("stop", {"path": str(tmp_path / "a"), "wait": 1}, "unknown field(s) 'wait'"),
        ("stop", {"path": "", "drain": True}, "'path' must be the savepoint folder"),
    ]
    with api(job) as http:
        for route, body, message in cases:
            if isinstance(body, bytes):
                r = http.post(f"/api/v1/jobs/{jid}/{route}", content=body)
            else:
                r = http.post(f"/api/v1/jobs/{jid}/{route}", json=body)
            assert r.status_code == 400, f"{route} {body!r}: {r.status_code} {r.text}"
            assert message in r.json()["error"], f"{route} {body!r}: {r.json()['error']}"
        too_big = http.post(
            f"/api/v1/jobs/{jid}/savepoints", content=b"{" + b" " * MAX_BODY_BYTES + b"}"
        )
        assert too_big.status_code == 413 and "larger than" in too_big.json()["error"]
        # no path: the job's default savepoint folder; this job has none, so it refuses
        # (issue 37 item 13) and keeps running
        r = http.post(f"/api/v1/jobs/{jid}/stop", json={"drain": True})
        assert r.status_code == 409, r.text
        assert "no default savepoint folder" in r.json()["error"]
        assert "lockgate cancel JOB" in r.json()["error"]
    assert job.running and not (tmp_path / "a").exists()


def test_savepoint_then_stop_through_the_api(job: lg.JobClient, tmp_path: Path) -> None:
    jid = job_id(job)
    with api(job) as http:
        r = http.post(
            f"/api/v1/jobs/{jid}/savepoints", json={"path": str(tmp_path / "sp1"), "timeout": 60}
        )
        assert r.status_code == 200, r.text
        location = r.json()["location"]
        assert (Path(location) / METADATA).is_file()
        # the same folder again: it holds a savepoint (checked before the job is asked)
        r = http.post(f"/api/v1/jobs/{jid}/savepoints", json={"path": str(tmp_path / "sp1")})
        assert r.status_code == 400 and "already holds a savepoint" in r.json()["error"]
        # a savepoint that cannot complete in time
        r = http.post(
            f"/api/v1/jobs/{jid}/savepoints", json={"path": str(tmp_path / "sp2"), "timeout": 1e-6}
        )
        assert r.status_code == 504, r.text
        assert "timeout" in r.json()["error"]
        assert job.running
        r = http.post(
            f"/api/v1/jobs/{jid}/stop", json={"path": str(tmp_path / "final"), "timeout": 60}
        )
        assert r.status_code == 200, r.text
        final = r.json()["location"]
    result = job.wait(60)
    assert result.status is lg.JobStatus.FINISHED and result.savepoint_path == final
    assert (Path(final) / METADATA).is_file()
    # the job has ended: its server is gone
    with api(job) as http, pytest.raises(httpx.ConnectError):
        http.get("/api/v1/jobs")


def test_cancel_through_the_api(job: lg.JobClient) -> None:
    jid = job_id(job)
    with api(job) as http:
        r = http.post(f"/api/v1/jobs/{jid}/cancel")
    assert r.status_code == 202 and r.json() == {"status": "CANCELING"}
    assert job.wait(60).status is lg.JobStatus.CANCELED
    assert not job._rest.running  # type: ignore[attr-defined]


def test_savepoints_of_a_job_without_checkpointing_get_409(tmp_path: Path) -> None:
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor(), checkpointing=False))
    try:
        with api(client) as http:
            r = http.post(
                f"/api/v1/jobs/{job_id(client)}/savepoints", json={"path": str(tmp_path / "sp")}
            )
        assert r.status_code == 409 and "enable_checkpointing" in r.json()["error"]
    finally:
        stop(client)


def test_the_server_binds_127_0_0_1_by_default_and_the_registry_keeps_url_and_token(
    job: lg.JobClient,
) -> None:
    assert lg.ExecutionConfig().rest_bind == "127.0.0.1"
    assert lg.ExecutionConfig().rest_port == 0
    assert job.rest_url is not None and job.rest_url.startswith("http://127.0.0.1:")
    server = job._rest  # type: ignore[attr-defined]
    assert server.host == "127.0.0.1" and server.port == int(job.rest_url.rsplit(":", 1)[1])
    assert job._handle.rest_url == job.rest_url  # type: ignore[attr-defined]
    assert isinstance(job.rest_token, str) and len(job.rest_token) >= 40
    entry = find_job(job_id(job))
    assert entry.rest_url == job.rest_url and entry.rest_token == job.rest_token
    assert stat.S_IMODE(os.stat(entry.path).st_mode) == 0o600
    assert job.rest_token not in repr(entry)
    # a registration file of an older lockgate (without them) still reads
    old = json.loads(entry.to_json())
    del old["rest_url"], old["rest_token"]
    parsed = JobInfo.from_json(json.dumps(old), entry.path)
    assert parsed.rest_url is None and parsed.rest_token is None
    with pytest.raises(ValueError, match="rest_url"):
        JobInfo.from_json(json.dumps({**old, "rest_url": 5}), entry.path)


def test_rest_disabled_serves_nothing(tmp_path: Path) -> None:
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor(), rest_enabled=False))
    try:
        assert client.rest_url is None and client.rest_token is None
        entry = find_job(client._registration.job_id)  # type: ignore[arg-type]
        assert entry.rest_url is None and entry.rest_token is None
    finally:
        stop(client)


def test_a_port_in_use_logs_a_warning_and_the_job_runs_without_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="lockgate.api.job_client"):
            client = start(numbers_job(tmp_path, executor=lg.LocalExecutor(), rest_port=port))
        try:
            assert client.rest_url is None and client.rest_token is None
            assert any(
                "serves no REST API" in r.getMessage() and str(port) in r.getMessage()
                for r in caplog.records
            )
        finally:
            stop(client)
    finally:
        taken.close()


def test_the_token_is_logged_and_printed_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.DEBUG):
        client = start(numbers_job(tmp_path, executor=lg.LocalExecutor()))
        token = client.rest_token
        assert token
        with api(client) as http:
            http.get("/metrics")
            http.post(f"/api/v1/jobs/{job_id(client)}/cancel")
        client.wait(60)
    out = capsys.readouterr()
    assert token not in out.out and token not in out.err
    assert not [r for r in caplog.records if token in r.getMessage()]
    assert any(client.rest_url in r.getMessage() for r in caplog.records)  # the URL is


def test_a_connection_that_sends_no_request_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rest_server, "HEAD_TIMEOUT_S", 0.3)
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor()))
    try:
        host, port = client.rest_url.removeprefix("http://").rsplit(":", 1)  # type: ignore[union-attr]
        with socket.create_connection((host, int(port)), timeout=30) as silent:
            # the server closes it: recv returns b"" (an error here would be a timeout)
            assert silent.recv(1) == b""
        # a request head sent byte by byte too slowly is cut off the same way
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(b"GET /api/v1/jobs HTTP/1.1\r\n")
            assert slow.recv(1) == b""
        with api(client) as http:  # the server still serves others
            assert http.get("/api/v1/jobs").status_code == 200
    finally:
        stop(client)


def test_an_ended_job_takes_no_commands_and_a_missing_dashboard_gets_a_placeholder(
    tmp_path: Path,
) -> None:
    """A server for a job that has ended (the window before its own server stops):
    commands get 409, reads still answer; without index.html ``/`` is a placeholder."""
    from lockgate.rest import start_rest_server

    client = start(
        numbers_job(tmp_path, executor=lg.LocalExecutor(), rest_enabled=False), name="ended"
    )
    stop(client)
    token = "t" * 43
    server = start_rest_server(
        client, token, lambda: "job-1", name="ended", static_dir=str(tmp_path / "none")
    )
    try:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
            for route, body in (
                ("savepoints", {"path": str(tmp_path / "sp")}),
                ("stop", {"path": str(tmp_path / "sp")}),
                ("cancel", None),
            ):
                r = http.post(f"/api/v1/jobs/job-1/{route}", json=body)
                assert r.status_code == 409, f"{route}: {r.status_code} {r.text}"
                assert "has ended (CANCELED)" in r.json()["error"]
            assert http.get("/api/v1/jobs/job-1").json()["status"] == "CANCELED"
            assert http.get("/api/v1/jobs/job-1/metrics").json()["operators"] == []
            page = http.get("/")
            assert page.status_code == 200 and "dashboard is not installed" in page.text
            assert http.get("/static/index.html").status_code == 404
    finally:
        server.stop()
    assert not server.running
    assert not (tmp_path / "sp").exists()


def test_a_slow_body_gets_408(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(The limits on connections and requests in progress: test_rest_slow_clients.py.)"""
    import lockgate.rest.app as rest_app

    monkeypatch.setattr(rest_app, "BODY_TIMEOUT_S", 0.3)
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor()))
    try:
        host, port = client.rest_url.removeprefix("http://").rsplit(":", 1)  # type: ignore[union-attr]
        address = (host, int(port))
        jid = job_id(client)
        with socket.create_connection(address, timeout=30) as slow:
            slow.sendall(
                f"POST /api/v1/jobs/{jid}/savepoints HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {client.rest_token}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
            )
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = slow.recv(4096)
                assert chunk, f"closed without an answer: {answer!r}"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), answer
        with api(client) as http:
            assert http.get("/api/v1/jobs").status_code == 200
    finally:
        stop(client)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.213.37.1", False),
        ("driver.example", False),
    ],
)
def test_binding_beyond_loopback_is_recognised_for_its_plain_http_warning(host, loopback) -> None:
    from lockgate.api.job_client import _is_loopback

    assert _is_loopback(host) is loopback
