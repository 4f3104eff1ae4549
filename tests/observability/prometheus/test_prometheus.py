#!/usr/bin/python3
"""The controller's /metrics (logging.prometheus), scraped by a real Prometheus server.

A run with logging.prometheus.port 0 (and logging.dashboard) writes RUN_DIR/prometheus_port;
this test starts Debian's `prometheus` with a scrape config pointing at it, asks its HTTP
API for tandem_step until it is >= 2, checks up{} and the worker gauges, lints a fetched
/metrics with `promtool check metrics`, checks the run's own dashboard answers, then
`tandem stop`s the run. Skips (77) without the prometheus package.

Usage: test_prometheus.py TANDEM
"""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SOURCE = pathlib.Path(__file__).resolve().parents[3]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for(what, check, timeout_s, processes=()):
    """check() until it returns something true; fails at once when one of `processes` ends."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        for name, process in processes:
            if process.poll() is not None:
                raise AssertionError(f"{name} exited {process.returncode} while waiting for {what}")
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last error: {last})")


def query(server, expr):
    body = json.loads(get(f"http://127.0.0.1:{server}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert body["status"] == "success", body
    return body["data"]["result"]


def stop(process, grace=10):
    if process and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def raise_on_sigterm(signum, frame):
    # meson's timeout sends SIGTERM: unwind through the finally below so that the run and
    # the Prometheus server do not outlive the test.
    raise SystemExit(f"stopped by signal {signum}")


def main():
    tandem = sys.argv[1]
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        print("SKIP: Debian's prometheus package (prometheus, promtool) is not installed")
        return 77
    run_proc = server_proc = None
    with tempfile.TemporaryDirectory(prefix="tandem-prom-") as tmp:
        tmp = pathlib.Path(tmp)
        run = tmp / "run"
        try:
            with open(tmp / "run.out", "w") as run_log:  # the child keeps its own descriptor
                run_proc = subprocess.Popen(
                    [tandem, "run", str(SOURCE / "configs/quickstart.yaml"), "--run-dir", str(run),
                     "--set", "experiment.steps=3000", "--set", "sft.steps=0", "--set", "placement=disaggregated",
                     "--set", "logging.prometheus.port=0", "--set", "logging.dashboard=true",
                     "--set", "logging.console=plain"],
                    stdout=run_log, stderr=subprocess.STDOUT)
            port = int(wait_for("RUN_DIR/prometheus_port", lambda: (run / "prometheus_port").read_text().strip(), 120,
                                [("the run", run_proc)]))
            print(f"run: /metrics on 127.0.0.1:{port}")

            server = free_port()
            (tmp / "prometheus.yml").write_text(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n"
                f"  - job_name: tandem\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
            with open(tmp / "prometheus.out", "w") as server_log:
                server_proc = subprocess.Popen(
                    [prometheus, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{server}"],
                    stdout=server_log, stderr=subprocess.STDOUT)
            # The first samples are queryable some seconds after the server starts.
            step = wait_for("tandem_step >= 2 in Prometheus",
                            lambda: [float(r["value"][1]) for r in query(server, "tandem_step")
                                     if float(r["value"][1]) >= 2], 60,
                            [("the run", run_proc), ("prometheus", server_proc)])
            print(f"prometheus: tandem_step = {step[0]:g}")
            up = query(server, 'up{job="tandem"}')
            assert up and float(up[0]["value"][1]) == 1, up
            workers = wait_for("tandem_worker_up for 3 workers",
                               lambda: (lambda r: r if len(r) == 3 else None)(query(server, "tandem_worker_up")), 30)
            assert {w["metric"]["worker"] for w in workers} == {"rollout-0", "rollout-1", "learner-0"}, workers
            assert all(float(w["value"][1]) == 1 for w in workers), workers
            assert all(w["metric"]["host"] for w in workers), workers
            reward = query(server, "tandem_reward_mean")
            assert reward and 0 <= float(reward[0]["value"][1]) <= 1, reward
            generate = query(server, 'tandem_worker_command_seconds{command="rollout_generate"}')
            assert len(generate) == 2 and all(float(g["value"][1]) > 0 for g in generate), generate
            age = query(server, "tandem_worker_heartbeat_age_seconds")
            assert len(age) == 3 and all(0 <= float(a["value"][1]) < 10 for a in age), age
            print("prometheus: up, 3 workers up, reward, command times and heartbeat ages queried")

            text = get(f"http://127.0.0.1:{port}/metrics")
            (tmp / "metrics.txt").write_text(text)
            lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
            assert lint.returncode == 0, f"promtool check metrics: {lint.stdout}{lint.stderr}"
            assert "tandem_steps_done_total" in text and "# HELP tandem_reward_mean" in text
            print(f"promtool: {len(text.splitlines())} lines of /metrics pass `promtool check metrics`")
            # promtool can fail: a counter without _total is refused.
            bad = subprocess.run([promtool, "check", "metrics"], input="# HELP x_count c\n# TYPE x_count counter\nx_count 1\n",
                                 capture_output=True, text=True, timeout=60)
            assert bad.returncode != 0, "promtool accepted a counter without _total"

            url = (run / "dashboard_url").read_text().strip()
            status = json.loads(get(url.rstrip("/") + "/api/status"))
            assert status.get("state") == "running", status
            print(f"dashboard: {url} answers during the run")

            subprocess.run([tandem, "stop", str(run)], check=True, capture_output=True, timeout=30)
            code = run_proc.wait(120)
            assert code == 0, f"the run exited {code} after tandem stop: {(tmp / 'run.out').read_text()[-2000:]}"
            print("run: stopped by tandem stop, exit 0")
        except BaseException:
            for name in ("run.out", "prometheus.out"):
                path = tmp / name
                if path.exists():
                    print(f"--- {name} (tail)\n{path.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            stop(run_proc, 30)
            stop(server_proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
