"""`make demo` ends with the command that opens the dashboard on the demo's store; it works."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_prints_a_dashboard_command_that_opens_its_store() -> None:
    out = subprocess.run(
        [sys.executable, "examples/jobs_demo.py", "--jobs", "200"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    last = out.strip().splitlines()[-1]
    found = re.fullmatch(
        r"\s*BATCHY_DEMO_STORE=(\S+) (.+ -m batchy dashboard \S+) --port 8000", last
    )
    assert found, out
    store, command = found.groups()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [*shlex.split(command), "--port", str(port)],
        cwd=ROOT, env={**os.environ, "BATCHY_DEMO_STORE": store},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "the dashboard did not answer in 30s"
                time.sleep(0.1)
        assert page.status_code == 200
        assert f"SQLite {store}/jobs.db" in page.text
        assert 'data-total-processed="200"' in page.text  # what the demo's worker counted
    finally:
        server.terminate()
        server.wait(timeout=15)
        shutil.rmtree(store, ignore_errors=True)
