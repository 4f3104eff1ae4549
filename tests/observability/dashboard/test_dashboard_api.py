"""`tandem dashboard`'s JSON endpoints and static files over a run directory made up by
this test (docs/dashboard.md): incremental metrics (after=), partial last lines, a
metrics.jsonl cut back by a resume, samples, phases, log errors, bad queries, and the
command's exit codes (a missing or non-run directory: 2; a taken port: 1).

Usage: test_dashboard_api.py TANDEM"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_helpers import Processes, check, fetch, fetch_any, fetch_json, start_dashboard, stop_dashboard  # noqa: E402

INJECTED = '<img src=x onerror="document.title=1"><b id="injected">bold</b>'


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


def jsonl(rows):
    return "".join(json.dumps(row) + "\n" for row in rows)


def make_run(run_dir):
    write(f"{run_dir}/config.yaml", "experiment: {name: made-up, steps: 10}\n")
    workers = [{"name": n, "state": "ready", "pid": 0, "hostname": "node-a", "address": "tcp://10.0.0.1:5555",
                "restarts": r, "log": f"{run_dir}/logs/{n}.log"} for n, r in [("rollout-0", 0), ("learner-0", 2)]]
    write(f"{run_dir}/status.json", json.dumps({
        "state": "running", "pid": os.getpid(), "hostname": socket.gethostname(), "started_unix": 1.0,
        "updated_unix": 2.0, "step": 5, "steps": 10, "step_seconds": 0.5, "workers": workers,
        "last_error": "rollout-0 restarted", "last_error_log": f"{run_dir}/logs/rollout-0.log"}))
    rows = [{"step": s, "reward/mean": s / 10, "time/step_s": 0.5, "note": "text is not plotted",
             "nested": {"value": s}} for s in range(1, 6)]
    del rows[2]["time/step_s"]  # a row without a key: null there
    write(f"{run_dir}/metrics.jsonl", jsonl(rows) + '{"step": 6, "reward/mean": 0.')  # mid-write
    samples = [{"step": s, "prompt": f"{s}+1=", "response": str(s + 1), "reward": 1.0, "finish_reason": "stop"}
               for s in range(1, 19)]
    samples.append({"step": 19, "prompt": "long", "response": "y" * 5000, "reward": 0.0})
    samples.append({"step": 20, "prompt": "html?", "response": INJECTED, "reward": 0.0})
    write(f"{run_dir}/samples.jsonl", jsonl(samples) + '{"step": 21, "prompt": "cut')
    phases = [{"step": s, "time": 1764000000.0 + s, "workers": {"rollout-0": {"rollout_generate": 0.5},
                                                                 "learner-0": {"learner_train": 0.8}},
               "stragglers": ["rollout-0"] if s == 3 else []} for s in range(1, 4)]
    write(f"{run_dir}/worker_phases.jsonl", jsonl(phases))
    write(f"{run_dir}/logs/controller-0.log",
          "2026-11-24 07:03:19.858 INFO  [controller-0] all is well\n"
          "2026-11-24 07:03:21.000 WARN  [controller-0] rollout-1 is a straggler\n"
          "terminate called after throwing an instance of 'std::runtime_error'\n"
          "2026-11-24 07:03:23.000 ERROR [controller-0] worker rollout-0 failed\n")
    write(f"{run_dir}/logs/rollout-0.log",
          "2026-11-24 07:03:22.000 ERROR [rollout-0] out of memory\n"
          "2026-11-24 07:03:24.000 INFO  [rollout-0] this error word is only info\n")


def check_static_files(url):
    _, headers, page = fetch(url)
    check(headers["Content-Type"].startswith("text/html"), f"/ is {headers['Content-Type']}, not HTML")
    check(b'src="/dashboard.js"' in page and b'src="/charts.js"' in page, "the page does not load its scripts")
    check("script-src 'self'" in headers.get("Content-Security-Policy", ""), "no Content-Security-Policy")
    check(b"http://" not in page and b"https://" not in page, "the page refers to another site")
    for name, kind in [("dashboard.js", "text/javascript"), ("charts.js", "text/javascript"),
                       ("dashboard.css", "text/css"), ("index.html", "text/html")]:
        _, headers, body = fetch(url + name)
        check(headers["Content-Type"].startswith(kind) and len(body) > 100, f"/{name}: {headers['Content-Type']}")
    fetch(url + "no-such-file", expect_status=404)
    status, _, body = fetch_any(url + "../config.yaml")
    check(status in (400, 404) and b"experiment" not in body, f"/../config.yaml: {status} {body[:200]!r}")


def check_metrics(url, run_dir):
    m = fetch_json(url + "api/metrics")
    check(m["steps"] == [1, 2, 3, 4, 5], f"metrics steps {m['steps']}: the partial line must be skipped")
    check(m["series"]["reward/mean"] == [0.1, 0.2, 0.3, 0.4, 0.5], f"reward/mean {m['series']['reward/mean']}")
    check(m["series"]["time/step_s"] == [0.5, 0.5, None, 0.5, 0.5], f"time/step_s {m['series']['time/step_s']}")
    check(m["series"]["nested/value"] == [1, 2, 3, 4, 5], "nested objects are not flattened with '/'")
    check("note" not in m["series"] and "step" not in m["series"], f"non-numeric keys plotted: {list(m['series'])}")
    check(m["last_step"] == 5, f"last_step {m['last_step']}")
    epoch = m["epoch"]

    m = fetch_json(url + "api/metrics?after=3")
    check(m["steps"] == [4, 5] and m["series"]["reward/mean"] == [0.4, 0.5], f"after=3: {m}")
    check(fetch_json(url + "api/metrics?after=5")["steps"] == [], "after=5 returned rows")

    append(f"{run_dir}/metrics.jsonl", '6, "extra/new": 7}\n' + json.dumps({"step": 7, "reward/mean": 0.7}) + "\n")
    m = fetch_json(url + "api/metrics?after=5")
    check(m["steps"] == [6, 7] and m["series"]["reward/mean"] == [0.6, 0.7], f"after the line completed: {m}")
    check(m["series"]["extra/new"] == [7, None], f"a key new at step 6: {m['series'].get('extra/new')}")
    check(m["epoch"] == epoch, "the epoch changed though the file only grew")

    thinned = fetch_json(url + "api/metrics?max_points=3")
    check(len(thinned["steps"]) <= 4 and thinned["steps"][-1] == 7, f"max_points=3 gave {thinned['steps']}")

    for bad in ["after=abc", "after=nan", "max_points=-1", "max_points=1.5"]:
        error = fetch_json(url + "api/metrics?" + bad, expect_status=400)
        check(bad.split("=")[0] in error.get("error", ""), f"{bad}: the error does not name the parameter: {error}")

    # A resume cuts metrics.jsonl back (here: rewritten shorter): the epoch changes and
    # the rows start over.
    write(f"{run_dir}/metrics.jsonl", jsonl([{"step": 1, "reward/mean": 0.9}, {"step": 2, "reward/mean": 0.8}]))
    m = fetch_json(url + "api/metrics?after=7")
    check(m["epoch"] != epoch and m["steps"] == [], f"after the file was cut back: {m}")
    m = fetch_json(url + "api/metrics")
    check(m["steps"] == [1, 2] and m["series"]["reward/mean"] == [0.9, 0.8], f"the cut-back file reads {m}")


def check_samples(url):
    s = fetch_json(url + "api/samples?n=5")
    steps = [row["step"] for row in s["rows"]]
    check(steps == [20, 19, 18, 17, 16], f"newest 5 samples, newest first: {steps} (the partial line skipped)")
    check(s["rows"][0]["response"] == INJECTED, "a sample's text must come back unchanged (the page escapes it)")
    long = s["rows"][1]["response"]
    check(2000 <= len(long) < 2100 and long.endswith("..."), f"a 5000-char response came back {len(long)} chars")
    check(len(fetch_json(url + "api/samples")["rows"]) == 12, "the default is 12 samples")


def check_phases(url):
    p = fetch_json(url + "api/phases")
    check(p["present"] and [r["step"] for r in p["rows"]] == [1, 2, 3], f"phases: {p}")
    check(p["rows"][2]["stragglers"] == ["rollout-0"], "the stragglers list is lost")
    check([r["step"] for r in fetch_json(url + "api/phases?after=2")["rows"]] == [3], "phases after=2")
    check([r["step"] for r in fetch_json(url + "api/phases?limit=1")["rows"]] == [3], "phases limit=1")


def check_errors(url):
    lines = fetch_json(url + "api/errors")["lines"]
    texts = [(line["level"], line["log"], line["text"]) for line in lines]
    expected = [("WARN", "controller-0.log", "[controller-0] rollout-1 is a straggler"),
                ("OUTPUT", "controller-0.log", "terminate called after throwing an instance of 'std::runtime_error'"),
                ("ERROR", "rollout-0.log", "[rollout-0] out of memory"),
                ("ERROR", "controller-0.log", "[controller-0] worker rollout-0 failed")]
    check(texts == expected, f"errors: {texts}")
    check(lines[0]["time"] == "2026-11-24 07:03:21.000", f"time {lines[0]['time']}")
    check(len(fetch_json(url + "api/errors?n=1")["lines"]) == 1, "errors n=1")


def check_status(url, run_dir):
    s = fetch_json(url + "api/status")
    check(s["state"] == "running" and s["step"] == 5 and s["steps"] == 10, f"status: {s}")
    check(s["controller_alive"] is True, "the controller pid (this test) is alive, status says otherwise")
    check([w["name"] for w in s["workers"]] == ["rollout-0", "learner-0"] and s["workers"][1]["restarts"] == 2,
          f"workers: {s['workers']}")
    check(s["status_present"] and not s["finished"], "status_present / finished wrong")
    check(os.path.samefile(s["run_dir"], run_dir), f"run_dir {s['run_dir']}")


def check_exit_codes(tandem, root, run_dir, url):
    for target, words in [(f"{root}/no-such-run", "is not a directory"), (root, "not a run directory")]:
        result = subprocess.run([tandem, "dashboard", target], capture_output=True, text=True, timeout=60)
        check(result.returncode == 2 and words in result.stderr and target in result.stderr,
              f"tandem dashboard {target}: exit {result.returncode}, {result.stderr!r}")
    port = urllib.parse.urlparse(url).port
    result = subprocess.run([tandem, "dashboard", run_dir, "--port", str(port)], capture_output=True, text=True,
                            timeout=60)
    check(result.returncode == 1 and f"127.0.0.1:{port}" in result.stderr,
          f"a second dashboard on the taken port {port}: exit {result.returncode}, {result.stderr!r}")


def check_without_optional_files(processes, tandem, root):
    """A run that has only its config so far (a controller starting, or an old run)."""
    run_dir = f"{root}/bare"
    write(f"{run_dir}/config.yaml", "experiment: {name: bare}\n")
    dashboard, url = start_dashboard(processes, tandem, run_dir)
    s = fetch_json(url + "api/status")
    check(not s["status_present"] and s["controller_alive"] is None, f"bare status: {s}")
    check(fetch_json(url + "api/metrics") == {"epoch": 1, "steps": [], "series": {}, "total_rows": 0,
                                              "last_step": None}, "bare metrics")
    p = fetch_json(url + "api/phases")
    check(not p["present"] and p["rows"] == [], f"bare phases: {p}")
    s = fetch_json(url + "api/samples")
    check(not s["present"] and s["rows"] == [], f"bare samples: {s}")
    check(fetch_json(url + "api/errors")["lines"] == [], "bare errors")
    stop_dashboard(dashboard)


def main():
    tandem = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="tandem-dashboard-api-") as root, Processes() as processes:
        run_dir = f"{root}/run"
        make_run(run_dir)
        dashboard, url = start_dashboard(processes, tandem, run_dir)
        with open(f"{run_dir}/dashboard_url") as f:
            check(f.read().strip() == url, "RUN_DIR/dashboard_url is not the printed URL")
        check_static_files(url)
        check_status(url, run_dir)
        check_metrics(url, run_dir)
        check_samples(url)
        check_phases(url)
        check_errors(url)
        check_exit_codes(tandem, root, run_dir, url)
        stop_dashboard(dashboard)
        check_without_optional_files(processes, tandem, root)
    print("dashboard endpoints: ok")


if __name__ == "__main__":
    main()
