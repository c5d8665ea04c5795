"""The web dashboard in a real browser (issue 21, item 4): Debian's headless Chromium,
driven by Selenium through chromedriver, opens the page a running job's driver serves,
logs in through the form with the job's token, sees the job graph (the task behind a
throttled sink coloured red for backpressure >= 500 ms/s, as the REST API reports it) and
a completed checkpoint in the chart, writes a savepoint from the page, and saves a
screenshot.

No mock of the browser, the server or the job: when Chromium or chromedriver is missing,
the session fixture installs them with ``scripts/browser.sh`` (apt-get) instead of
skipping."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

import lockgate as lg
from conftest import wait_until
from lockgate.checkpoint.storage import METADATA
from lockgate.connectors import SequenceSource, Sink, SinkWriter
from lockgate.connectors.builtin.discarding_sink import DiscardingSink
from lockgate.core.batch import num_rows
from lockgate.testing import FailAtRecord, inject_faults

REPO = Path(__file__).resolve().parents[2]
#: every wait on the page is bounded by this (seconds)
PAGE_WAIT_S = 90


class ThrottledWriter(SinkWriter):
    """Writes at most ``rows_per_s`` rows a second, so the tasks before it backpressure."""

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s
        self.pause = threading.Event()  # never set: wait() is the throttle

    def write(self, batch: Any) -> None:
        self.pause.wait(num_rows(batch) / self.rows_per_s)


class ThrottledSink(Sink):
    default_name = "throttled"

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s

    def create_writer(self, ctx: Any) -> SinkWriter:
        return ThrottledWriter(self.rows_per_s)


class Sum(lg.KeyedProcessFunction):
    """A running sum per key: keyed state, so checkpoints have a size."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value: int, ctx: Any) -> Any:
        self.total.update(self.total.value() + value)
        yield {"k": ctx.current_key, "total": self.total.value()}


@pytest.fixture(scope="session")
def browser_paths() -> dict[str, str]:
    """Chromium and chromedriver, installed by scripts/browser.sh when missing (a session
    fixture, so an install runs before any test's hang guard starts)."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "browser.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        pytest.fail(
            "scripts/browser.sh could not provide chromium and chromedriver (it installs "
            "Debian's chromium and chromium-driver with apt-get, as root or with password-"
            f"less sudo):\n{done.stdout}{done.stderr}"
        )
    paths = dict(
        line.split("=", 1) for line in done.stdout.splitlines() if line.startswith("chrom")
    )
    assert set(paths) == {"chromium", "chromedriver"}, done.stdout
    return paths


@pytest.fixture
def driver(browser_paths: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = browser_paths["chromium"]
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1300",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(
        executable_path=browser_paths["chromedriver"], log_output=str(tmp_path / "chromedriver.log")
    )
    browser = webdriver.Chrome(service=service, options=options)
    browser.set_page_load_timeout(30)
    browser.set_script_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


def backpressured_job(tmp_path: Path) -> lg.StreamEnvironment:
    """numbers (with event times from now on, and watermarks) -> per-key sums -> a sink that
    takes 20,000 rows/s: the tasks before the sink are backpressured; checkpoints every
    200 ms; latency markers every 200 ms; the sums fail once early in the first attempt (a
    restart with a traceback)."""
    env = lg.StreamEnvironment(parallelism=1)
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.config.channel_capacity_bytes = 64 * 1024
    env.config.buffer_max_bytes = 16 * 1024
    env.config.buffer_max_rows = 500
    env.config.progress_interval_ms = 0
    env.config.latency_tracking_interval_ms = 200
    now_ms = int(time.time() * 1000)
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(
        timedelta(milliseconds=500)
    ).with_timestamp_assigner(lambda v: now_ms + v // 20)
    (
        env.from_source(
            SequenceSource(0, 10**9, batch_size=500, bounded=False),
            name="numbers",
            watermark_strategy=strategy,
        )
        .uid("numbers")
        .key_by(lambda v: v % 16)
        .process(Sum(), name="sums")
        .uid("sums")
        .rebalance()
        .sink_to(ThrottledSink(20_000), name="slow sink")
        .uid("slow-sink")
    )
    inject_faults(env, FailAtRecord("sums", record=2_000, attempt=0))
    return env


def rest_get(client: lg.JobClient, path: str) -> Any:
    request = urllib.request.Request(
        f"{client.rest_url}{path}", headers={"Authorization": f"Bearer {client.rest_token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def page_wait(driver: Any) -> WebDriverWait:
    """A bounded wait on the page. The page redraws its tables as it polls, so an element
    found a moment ago may be gone: such a look is tried again."""
    return WebDriverWait(
        driver,
        PAGE_WAIT_S,
        poll_frequency=0.2,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )


def log_in(driver: Any, wait: WebDriverWait, client: lg.JobClient) -> None:
    """Open the job's page, which without the token shows a login form and no job data,
    and log in through the form with the job's token (kept by the page in this origin's
    sessionStorage, sent as a header; no cookie is set)."""
    assert client.rest_url and client.rest_url.startswith("http://127.0.0.1:")
    assert client.rest_token
    driver.get(client.rest_url + "/")
    token_field = wait.until(ec.visibility_of_element_located((By.NAME, "token")))
    assert "numbers" not in driver.page_source, "no job data before the login"
    token_field.send_keys(client.rest_token)
    token_field.submit()
    wait.until(ec.invisibility_of_element_located((By.ID, "login")), "the login form goes")
    wait.until(
        lambda d: d.find_element(By.ID, "job-name").text == client.job_name,
        "the page shows the job once logged in",
    )
    assert not driver.get_cookies(), "the login sets no cookie"


def submit_savepoint(
    driver: Any, wait: WebDriverWait, button: str, target: Path
) -> tuple[str, str, str]:
    """Click ``button``, give ``target`` as the folder, submit; return the outcome the page
    reports: its state ("done" or "failed"), the savepoint's location and the message."""
    wait.until(ec.element_to_be_clickable((By.ID, button))).click()
    path_field = wait.until(ec.visibility_of_element_located((By.ID, "savepoint-path")))
    path_field.clear()
    path_field.send_keys(str(target))
    driver.find_element(By.ID, "savepoint-submit").click()
    result = driver.find_element(By.ID, "action-result")
    wait.until(
        lambda d: result.get_attribute("data-state") in ("done", "failed"),
        "the page reports the savepoint",
    )
    return result.get_attribute("data-state"), result.get_attribute("data-location"), result.text


def savepoint_from_page(
    driver: Any, wait: WebDriverWait, button: str, target: Path
) -> tuple[str, str]:
    """:func:`submit_savepoint`, which must succeed: the savepoint is on disk at ``target``;
    return its location and the page's message."""
    state, location, text = submit_savepoint(driver, wait, button, target)
    assert state == "done", text
    assert location and Path(location).resolve() == target.resolve(), (location, target)
    assert (Path(location) / METADATA).is_file(), "the savepoint's metadata is on disk"
    return location, text


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.hang_guard(300)
def test_the_dashboard_shows_graph_backpressure_checkpoints_and_writes_a_savepoint(
    driver: Any, tmp_path: Path
) -> None:
    client = backpressured_job(tmp_path).execute_async("dashboard", executor=lg.LocalExecutor())
    try:
        wait_until(lambda: client.status() == "RUNNING", "the job runs", 120)
        wait = page_wait(driver)
        log_in(driver, wait, client)

        # the graph: one box per task, the source's behind the throttled sink red
        wait.until(
            lambda d: d.find_element(By.ID, "graph").get_attribute("data-vertices") == "3",
            "the job graph shows its 3 tasks",
        )
        edges = driver.find_elements(By.CSS_SELECTOR, "#graph svg.edges path.edge")
        assert len(edges) == 2, "one edge between each pair of tasks"

        def source_box() -> Any:
            boxes = driver.find_elements(By.CSS_SELECTOR, "#graph .vertex")
            return next(b for b in boxes if b.find_element(By.TAG_NAME, "h3").text == "numbers")

        wait.until(
            lambda d: source_box().get_attribute("data-level") == "high",
            "the source task, behind a throttled sink, is shown red (backpressure >= 500 ms/s)",
        )
        shown = float(source_box().get_attribute("data-backpressure"))
        assert shown >= 500
        assert "bp-high" in source_box().get_attribute("class")
        metrics = rest_get(client, f"/api/v1/jobs/{job_id(client)}/metrics")
        numbers = next(v for v in metrics["vertices"] if v["name"] == "numbers")
        assert numbers["backpressured_ms_per_s"] >= 500, numbers
        assert "/s" in source_box().find_element(By.CLASS_NAME, "rate-out").text

        # a completed checkpoint in the chart and the table
        wait.until(
            lambda d: d.find_elements(
                By.CSS_SELECTOR, "#checkpoint-chart rect.bar[data-status='completed']"
            ),
            "a completed checkpoint is drawn in the checkpoint chart",
        )
        assert int(driver.find_element(By.ID, "checkpoint-chart").get_attribute("data-completed"))
        assert driver.find_elements(By.CSS_SELECTOR, "#checkpoint-chart svg polyline.size-line")

        # a savepoint from the page: the button asks for a folder, the page shows where
        # the savepoint went, and it is there on disk
        target = tmp_path / "savepoints" / "sp-1"
        location, text = savepoint_from_page(driver, wait, "savepoint-button", target)
        assert text == f"Savepoint written: {location}"
        wait.until(
            lambda d: d.find_elements(
                By.CSS_SELECTOR,
                "#checkpoint-table tr[data-savepoint='true'][data-status='completed']",
            ),
            "the savepoint is listed with the checkpoints",
        )
        assert client.status() == "RUNNING", "a savepoint leaves the job running"
        assert not driver.find_element(By.ID, "errors").text, "the page shows no API error"

        # watermarks with what holds each back (the sums wait for their one input channel)
        def sums_watermark(d: Any) -> bool:
            row = d.find_element(By.CSS_SELECTOR, "#watermark-table tr[data-uid='sums']").text
            return "none yet" not in row and "input 0" in row

        wait.until(sums_watermark, "the sums operator's watermark and what holds it back")

        # the slow sink's end-to-end latency (p50, p95, p99, max in ms or s, markers)
        def sink_latency(d: Any) -> bool:
            row = d.find_element(By.CSS_SELECTOR, "#latency-table tr[data-uid='slow-sink']")
            cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
            return len(cells) == 7 and all(c.endswith((" ms", " s")) for c in cells[2:6])

        wait.until(sink_latency, "the slow sink's latency quantiles in the latency table")

        # the restart and its exception, the traceback folded until opened
        failure = wait.until(
            ec.presence_of_element_located((By.CSS_SELECTOR, "#exceptions details.exception")),
        )
        assert "InjectedFault" in failure.find_element(By.TAG_NAME, "summary").text
        traceback = failure.find_element(By.CSS_SELECTOR, "pre.traceback")
        assert not traceback.is_displayed()
        failure.find_element(By.TAG_NAME, "summary").click()
        wait.until(lambda d: traceback.is_displayed(), "the traceback opens")
        assert "Traceback (most recent call last)" in traceback.text
        assert "1 restart" in driver.find_element(By.ID, "exceptions").text
        failure.find_element(By.TAG_NAME, "summary").click()  # folded again: a shorter page
        wait.until(lambda d: not traceback.is_displayed(), "the traceback folds")

        # the whole page in the screenshot
        height, chrome = driver.execute_script(
            "return [document.documentElement.scrollHeight, outerHeight - innerHeight]"
        )
        driver.set_window_size(1400, max(900, min(int(height) + int(chrome) + 10, 2600)))
        driver.execute_script("window.scrollTo(0, 0)")
        shot = tmp_path / "dashboard.png"
        assert driver.save_screenshot(str(shot))
        data = shot.read_bytes()
        width, height = png_size(data)
        assert width >= 1000 and height >= 600, (width, height)
        assert 20_000 < len(data) < 10_000_000, len(data)
        if os.environ.get("LOCKGATE_DASHBOARD_SCREENSHOT"):  # docs/images/dashboard.png
            shutil.copyfile(shot, os.environ["LOCKGATE_DASHBOARD_SCREENSHOT"])

        # the API's error, as text: a savepoint is never written over another one
        state, _, text = submit_savepoint(driver, wait, "savepoint-button", target)
        assert state == "failed"
        assert "(400)" in text and "already holds a savepoint" in text, text

        # the page's own script ran without an error
        errors = [
            e["message"]
            for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and e.get("source") == "javascript"
        ]
        assert not errors, errors
    finally:
        client.cancel()
        client.wait(60)


def job_id(client: lg.JobClient) -> str:
    jobs = rest_get(client, "/api/v1/jobs")["jobs"]
    assert len(jobs) == 1, jobs
    return str(jobs[0]["id"])


@pytest.mark.hang_guard(300)
def test_stop_with_savepoint_from_the_dashboard_ends_the_job_and_the_page_says_so(
    driver: Any, tmp_path: Path
) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.config.progress_interval_ms = 0
    (
        env.from_source(
            SequenceSource(0, 10**9, rows_per_second=2_000, batch_size=100, bounded=False),
            name="numbers",
        )
        .uid("numbers")
        .key_by(lambda v: v % 4)
        .process(Sum(), name="sums")
        .uid("sums")
        .sink_to(DiscardingSink())
        .uid("sink")
    )
    client = env.execute_async("dashboard stop", executor=lg.LocalExecutor())
    try:
        wait_until(lambda: client.status() == "RUNNING", "the job runs", 120)
        wait = page_wait(driver)
        log_in(driver, wait, client)
        wait.until(
            lambda d: d.find_elements(
                By.CSS_SELECTOR, "#checkpoint-chart rect.bar[data-status='completed']"
            ),
            "a completed checkpoint is drawn in the checkpoint chart",
        )
        target = tmp_path / "final"
        location, text = savepoint_from_page(driver, wait, "stop-button", target)
        assert text == f"Stopped with savepoint {location}"
        result = client.wait(60)
        assert result.savepoint_path == location
        assert client.status() == "FINISHED"
        # the job's API ends with it: the page says so and offers no command
        wait.until(
            lambda d: (
                d.find_element(By.ID, "status").get_attribute("data-status")
                in ("FINISHED", "UNREACHABLE")
            ),
            "the page shows that the job ended",
        )
        assert not driver.find_element(By.ID, "savepoint-button").is_enabled()
        assert not driver.find_element(By.ID, "stop-button").is_enabled()
    finally:
        client.cancel()
        client.wait(60)
