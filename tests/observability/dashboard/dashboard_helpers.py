"""Shared by the dashboard tests: starting `tandem dashboard`, reading its URL, fetching
from it, and ending every process a test started on every exit path."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

SKIP = 77


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


class Processes:
    """Every process a test starts, each in its own session so that its children (a
    controller's workers, chromium's helpers) end with it."""

    def __init__(self):
        self.started = []

    def start(self, argv, **kwargs):
        process = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.started.append(process)
        return process

    def end_all(self):
        for process in self.started:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.end_all()
        return False


def start_dashboard(processes, tandem, run_dir, port=0):
    """Starts `tandem dashboard RUN_DIR --port PORT`; returns (process, url) once it printed its URL."""
    process = processes.start([tandem, "dashboard", run_dir, "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    url = process.stdout.readline().strip()  # the first line it prints; EOF if it exits first
    if not url.startswith("http://127.0.0.1:"):
        process.wait(timeout=30)
        fail(f"tandem dashboard {run_dir} printed {url!r} instead of its URL (exit {process.returncode}): "
             f"{process.stderr.read()}")
    return process, url


def stop_dashboard(process):
    """SIGTERM, then its exit status must be 0 (it ends within 30 s or the test fails)."""
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        fail("tandem dashboard did not end within 30 s of SIGTERM")
    check(code == 0, f"tandem dashboard exited {code} after SIGTERM, not 0: {process.stderr.read()}")


def fetch_any(url):
    """(status, headers, body bytes) of a GET, whatever the status."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def fetch(url, expect_status=200):
    """(status, headers, body bytes) of a GET; fails the test on an unexpected status."""
    status, headers, body = fetch_any(url)
    check(status == expect_status, f"GET {url}: status {status}, expected {expect_status}: {body[:500]!r}")
    return status, headers, body


def fetch_json(url, expect_status=200):
    _, headers, body = fetch(url, expect_status)
    check(headers.get("Content-Type", "").startswith("application/json"),
          f"GET {url}: Content-Type {headers.get('Content-Type')!r}, not JSON")
    return json.loads(body)


def wait_until(condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    fail(f"timed out after {timeout_s} s waiting for {what}")
