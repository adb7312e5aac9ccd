"""The dashboard in a real browser: Debian's chromium, driven through its chromedriver by Selenium.

``batchy dashboard`` serves the board (``board_app``) with uvicorn on a free
port, in a process of its own, and ``batchy worker`` runs beside it; the test
seeds the store, loads every page, takes screenshots of the main ones, checks
the charts drew what the store holds, retries a dead job and deletes a queued
job by clicking their buttons, and checks what the store holds afterwards.

Without chromium the test skips, and under CI=true fails (``make services``
installs it). ``BATCHY_SCREENSHOTS=DIR`` also saves the screenshots in DIR
(``make screenshots`` refreshes those of the docs).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from board_app import Board, make_backend, seed

from batchy.jobs import Activity, JobNotFound, Queue
from batchy.jobs._activity import minute_of

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: The pages shot for the docs: (file name, path).
SHOTS = (
    ("overview", "/"),
    ("jobs", "/jobs?state=queued"),
    ("job", "/jobs/{dead}"),
    ("dead", "/dead"),
    ("scheduled", "/scheduled"),
    ("workers", "/workers"),
    ("keys", "/keys"),
    ("shards", "/shards"),
    ("batching", "/batching"),
)


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def browser() -> Iterator[object]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        message = f"{', '.join(missing)} missing: apt-get install chromium chromium-driver"
        if _ci():
            pytest.fail(f"{message}; CI needs the browser (run `make services`)")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A ``$BATCHY_BOARD_STORE`` spec of a store the test and its servers share."""
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'jobs.db'}"
    elif request.param == "redis":
        host, port = request.getfixturevalue("redis_server")
        prefix = f"test:board:{uuid.uuid4().hex[:8]}:"
        yield f"redis:redis://{host}:{port}/12 {prefix}"
        import redis

        client = redis.Redis(host=host, port=port, db=12)
        keys = list(client.scan_iter(match=prefix + "*"))
        if keys:
            client.delete(*keys)
        client.close()
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        yield f"postgres:{dsn} {request.getfixturevalue('postgres_schema')}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(store: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BATCHY_BOARD_STORE": store, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "batchy", *args], cwd=HERE, env=env, stdout=out, stderr=out
        )


def _wait_for_port(port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"`batchy dashboard` exited with {server.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"`batchy dashboard` did not listen on port {port} in 30s:\n{log.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    assert path.stat().st_size > 10_000, f"{path} looks blank"


async def test_the_dashboard_in_a_browser(browser, store: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    board = Board(Queue(make_backend(store)))
    admin = board.queue.admin
    seeded = await seed(board, history=True)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    logs = tmp_path / "dashboard.log", tmp_path / "worker.log"
    server = _start(store, "dashboard", "board_app:queue", "--port", str(port), log=logs[0])
    worker = _start(store, "worker", "board_app:queue", "-q", "idle", log=logs[1])
    wait = WebDriverWait(driver, 15)

    def load(path: str, title: str) -> None:
        driver.get(base + path)
        wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "h1"), title))
        assert not driver.find_elements(By.CSS_SELECTOR, "p.error"), driver.page_source[:3000]

    try:
        _wait_for_port(port, server, logs[0])
        # A live worker appears on its page once its first heartbeat is in.
        deadline = time.monotonic() + 20
        while not (await admin.workers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        shots = tmp_path / "shots"
        shots.mkdir()
        titles = {
            "overview": "Overview", "jobs": "Jobs: queued", "job": "Job ", "dead": "Dead jobs",
            "scheduled": "Scheduled", "workers": "Workers", "keys": "Ordered keys",
            "shards": "Sharded runs", "batching": "Batching",
        }  # fmt: skip
        for name, path in SHOTS:
            load(path.format(dead=seeded.dead[0]), titles[name])
            driver.save_screenshot(str(shots / f"{name}.png"))
            _png(shots / f"{name}.png")
        target = os.environ.get("BATCHY_SCREENSHOTS")
        if target and store.startswith("sqlite:"):
            Path(target).mkdir(parents=True, exist_ok=True)
            for png in shots.iterdir():
                shutil.copy(png, Path(target) / png.name)

        # The charts: SVG drawn with the numbers the store holds. Page and read in
        # the same minute: the hour they show moves on at each minute's turn.
        async def load_and_read(path: str, title: str) -> Activity:
            for _ in range(3):
                minute = minute_of(time.time())
                load(path, title)
                activity = await Activity.read(board.queue.backend)
                if minute_of(time.time()) == minute:
                    break
            return activity

        activity = await load_and_read("/", "Overview")
        bars = driver.find_elements(
            By.CSS_SELECTOR, 'svg[data-chart="throughput"] rect.bar[data-series="processed"]'
        )
        assert len(bars) >= 50  # an hour of history, a bar a minute
        assert sum(float(b.get_attribute("data-value")) for b in bars) == activity.total(
            "processed"
        )
        assert all(float(b.get_attribute("height")) > 0 for b in bars)
        assert driver.find_element(By.CSS_SELECTOR, 'svg[data-chart="spark-mail"] polyline')
        activity = await load_and_read("/batching", "Batching")
        calls = driver.find_elements(
            By.CSS_SELECTOR, 'svg[data-chart="batching"] rect.bar[data-series="calls"]'
        )
        assert sum(float(b.get_attribute("data-value")) for b in calls) == activity.total("calls")
        line = driver.find_element(By.CSS_SELECTOR, 'svg[data-chart="rounds"] polyline')
        assert len(line.get_attribute("points").split()) >= 50
        load("/workers", "Workers")
        assert driver.find_elements(By.CSS_SELECTOR, "tr[data-worker]")
        load("/shards", "Sharded runs")
        bar = driver.find_element(By.CSS_SELECTOR, '[data-run="2026-06"] .progress')
        assert (bar.get_attribute("data-done"), bar.get_attribute("data-total")) == ("3", "4")

        # Stop live refresh: it must not swap the page while buttons are clicked.
        live = driver.find_element(By.ID, "live")
        live.click()
        assert not live.is_selected()

        # Retry a dead job from its page.
        load(f"/jobs/{seeded.dead[0]}", "Job ")
        driver.find_element(By.CSS_SELECTOR, 'button[data-action="retry_dead"]').click()
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "p.notice"), "Put 1"))
        assert (await admin.job(seeded.dead[0])).state == "queued"
        assert (await admin.job(seeded.dead[1])).state == "dead"

        # Delete a queued job from the list: the page asks first.
        load("/jobs?state=queued&queue=mail", "Jobs: queued")
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{seeded.queued[2]}"]')
        row.find_element(By.CSS_SELECTOR, 'button[data-action="delete"]').click()
        wait.until(ec.alert_is_present())
        driver.switch_to.alert.accept()
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "p.notice"), "Deleted 1"))
        with pytest.raises(JobNotFound):
            await admin.job(seeded.queued[2])
        left = await admin.jobs("queued", queue="mail")
        assert [j.id for j in left.jobs] == [i for i in seeded.queued if i != seeded.queued[2]]
        shown = driver.find_elements(By.CSS_SELECTOR, "tr[data-job]")
        assert seeded.queued[2] not in [r.get_attribute("data-job") for r in shown]

        # A traceback opens on the dead set's page.
        load("/dead", "Dead jobs")
        summary = driver.find_element(By.CSS_SELECTOR, "ul.dead details summary")
        summary.click()
        trace = driver.find_element(By.CSS_SELECTOR, "ul.dead details pre.traceback")
        assert trace.is_displayed() and "ValueError: card of user" in trace.text
    finally:
        _stop(worker)
        _stop(server)
        await board.queue.close()
