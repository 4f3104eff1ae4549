"""The dashboard in a real browser during a real run (docs/dashboard.md): starts the
quickstart with many steps, `tandem dashboard` beside it, and once a few steps are done
loads the page in headless Chromium twice: --dump-dom, whose DOM must show the step, a
row per worker and charts with plotted points (data-points), and --screenshot, whose PNG
must not be blank. Then `tandem stop` ends the run. A second, made-up run checks that a
sample holding markup shows as text. Skips (77) without /usr/bin/chromium.

Usage: test_dashboard_browser.py TANDEM SOURCE_ROOT OUTPUT_DIR
The screenshot is kept as OUTPUT_DIR/dashboard_screenshot.png and /tmp/dashboard_screenshot.png."""
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_helpers import SKIP, Processes, check, fail, fetch_json, start_dashboard, stop_dashboard, wait_until  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                  "--virtual-time-budget=5000"]
STEPS = 3000


def chromium(processes, scratch, args, what):
    """Runs headless Chromium with a fresh profile; returns its stdout."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=scratch)
    process = processes.start([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        fail(f"chromium ({what}) did not finish within 180 s")
    check(process.returncode == 0, f"chromium ({what}) exited {process.returncode}: {err[-3000:]}")
    return out


class DomElements(html.parser.HTMLParser):
    """Every element of a DOM dump as (tag, attributes), and the text inside chosen ids."""

    def __init__(self):
        super().__init__()
        self.elements = []
        self.text_of = {}
        self._open_ids = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.elements.append((tag, attributes))
        self._open_ids.append(attributes.get("id"))

    def handle_endtag(self, tag):
        if self._open_ids:
            self._open_ids.pop()

    def handle_data(self, data):
        for element_id in self._open_ids:
            if element_id:
                self.text_of[element_id] = self.text_of.get(element_id, "") + data

    def with_class(self, name):
        return [a for _, a in self.elements if name in (a.get("class") or "").split()]

    def by_id(self, element_id):
        return next((a for _, a in self.elements if a.get("id") == element_id), None)


def png_pixels(path):
    """(width, height, rows of pixel tuples) of an 8-bit non-interlaced RGB or RGBA PNG (stdlib only)."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    check(depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG format {header}")
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, channels)])
        previous = line
    return width, height, rows


def check_screenshot(path):
    check(os.path.getsize(path) > 10000, f"the screenshot is only {os.path.getsize(path)} bytes")
    width, height, rows = png_pixels(path)
    check((width, height) == (1400, 1000), f"screenshot size {width}x{height}")
    counts = {}
    for row in rows:
        for pixel in row:
            counts[pixel] = counts.get(pixel, 0) + 1
    background = max(counts.values())
    drawn = 1 - background / (width * height)
    check(len(counts) >= 32 and drawn >= 0.05,
          f"the screenshot looks blank: {len(counts)} colours, {drawn:.1%} not background")
    print(f"screenshot: {len(counts)} colours, {drawn:.1%} of pixels not background")


def check_dom(dom_text, run_dir):
    dom = DomElements()
    dom.feed(dom_text)
    with open(f"{run_dir}/status.json") as f:
        status = json.load(f)
    progress = dom.by_id("progress")
    check(progress is not None, "no #progress in the page")
    step = int(progress.get("data-step", "0"))
    check(2 <= step and int(progress.get("data-steps", "0")) == STEPS,
          f"progress shows step {step} of {progress.get('data-steps')}")
    check(f"step {step} of {STEPS}" in dom.text_of.get("progress-text", ""), "the progress text lacks the step")
    check(dom.text_of.get("run-state", "") == "running", f"the run shows as {dom.text_of.get('run-state')!r}")

    workers = [a.get("data-worker") for a in dom.with_class("worker-row")]
    expected = [w["name"] for w in status["workers"]]
    check(workers and sorted(workers) == sorted(expected), f"worker rows {workers}, status.json has {expected}")

    charts = dom.with_class("metric-chart")
    points = {a.get("data-key"): int(a.get("data-points", "0")) for a in charts}
    check(len(charts) >= 4, f"only {len(charts)} metric charts: {points}")
    check(all(n >= 2 for n in points.values()), f"charts without data: {points}")
    check("reward/mean" in points, f"no reward/mean chart among {sorted(points)}")
    check(len(dom.with_class("sample-row")) >= 1, "no sample rows")
    check("lost" not in (dom.by_id("connection") or {}).get("class", ""), "the page lost its server")
    if os.path.exists(f"{run_dir}/worker_phases.jsonl") and os.path.getsize(f"{run_dir}/worker_phases.jsonl") > 0:
        phase_charts = dom.with_class("phase-chart")
        check(phase_charts and int(phase_charts[0].get("data-points", "0")) >= 1, "the phases chart has no data")
        check(len(dom.with_class("phase-track")) >= 1, "no phase bars")
    print(f"page: step {step}, workers {workers}, charts {points}")


def check_markup_is_text(processes, tandem, scratch):
    """A sample that holds markup must appear as text, not become elements."""
    run_dir = f"{scratch}/made-up"
    os.makedirs(run_dir)
    with open(f"{run_dir}/config.yaml", "w") as f:
        f.write("experiment: {name: made-up}\n")
    markup = '<b id="injected">bold</b><img src=x onerror="document.title=1">'
    # A multi-turn sample: shown turn by turn, a tool's markup as text too.
    conversation = [{"role": "user", "content": "Guess a number.", "prompt": True},
                    {"role": "assistant", "content": "3", "begin": 0, "end": 2, "turn": 0},
                    {"role": "tool", "name": "calc", "content": '<i id="tool-markup">4</i>', "begin": 5, "end": 9},
                    {"role": "assistant", "content": "4", "begin": 12, "end": 14, "turn": 1}]
    with open(f"{run_dir}/samples.jsonl", "w") as f:
        f.write(json.dumps({"step": 1, "prompt": "p", "response": markup, "reward": 0}) + "\n")
        f.write(json.dumps({"step": 2, "prompt": "q", "response": "4", "reward": 1, "messages": conversation,
                            "stop_reason": "env_done"}) + "\n")
    dashboard, url = start_dashboard(processes, tandem, run_dir)
    dom_text = chromium(processes, scratch, ["--dump-dom", url], "made-up run")
    stop_dashboard(dashboard)
    dom = DomElements()
    dom.feed(dom_text)
    check(dom.by_id("injected") is None and not any(tag == "img" for tag, _ in dom.elements),
          "markup in a sample became elements of the page")
    check("&lt;b id=\"injected\"&gt;bold&lt;/b&gt;" in dom_text, "the sample's markup is not shown as text")
    turns = dom.with_class("turn")
    check(len(turns) == len(conversation), f"{len(turns)} turn elements for a conversation of {len(conversation)}")
    roles = [c for c in ("turn-user", "turn-assistant", "turn-tool") for t in turns if c in t.get("class", "")]
    check(sorted(roles) == sorted(f"turn-{m['role']}" for m in conversation), f"turn roles: {roles}")
    check(len(dom.with_class("turn-prompt")) == 1, "reset()'s message is not marked as the prompt's")
    check(dom.by_id("tool-markup") is None, "a tool message's markup became an element")
    check("calc" in dom_text and "env_done" in dom_text, "the tool's name or the stop reason is not shown")


def main():
    tandem, source_root, output_dir = sys.argv[1:4]
    if not os.access(CHROMIUM, os.X_OK):
        print(f"skip: {CHROMIUM} is not installed (Debian package chromium)")
        sys.exit(SKIP)
    scratch = tempfile.mkdtemp(prefix="tandem-dashboard-browser-")
    passed = False
    try:
        with Processes() as processes:
            run_dir = f"{scratch}/run"
            run = processes.start([tandem, "run", f"{source_root}/configs/quickstart.yaml",
                                   "--set", f"experiment.steps={STEPS}", "--set", "logging.console=plain",
                                   "--run-dir", run_dir],
                                  stdout=open(f"{scratch}/run.out", "w"), stderr=subprocess.STDOUT)

            def steps_done():
                check(run.poll() is None, f"the run ended early (exit {run.returncode}): see {scratch}/run.out")
                try:
                    with open(f"{run_dir}/metrics.jsonl") as f:
                        return f.read().count("\n") >= 3 and os.path.exists(f"{run_dir}/status.json")
                except FileNotFoundError:
                    return False

            wait_until(steps_done, 400, "3 steps of the run")
            dashboard, url = start_dashboard(processes, tandem, run_dir)
            check(fetch_json(url + "api/status")["state"] == "running", "the run is not running")

            check_dom(chromium(processes, scratch, ["--dump-dom", url], "dump-dom"), run_dir)
            screenshot = f"{scratch}/dashboard_screenshot.png"
            chromium(processes, scratch, [f"--screenshot={screenshot}", "--window-size=1400,1000", url], "screenshot")
            check(os.path.exists(screenshot), "chromium wrote no screenshot")
            os.makedirs(output_dir, exist_ok=True)
            shutil.copy(screenshot, f"{output_dir}/dashboard_screenshot.png")
            shutil.copy(screenshot, "/tmp/dashboard_screenshot.png")
            print(f"screenshot saved: {output_dir}/dashboard_screenshot.png, /tmp/dashboard_screenshot.png")
            check_screenshot(screenshot)

            stop = subprocess.run([tandem, "stop", run_dir], capture_output=True, text=True, timeout=60)
            check(stop.returncode == 0, f"tandem stop: exit {stop.returncode}: {stop.stderr}")
            try:
                code = run.wait(timeout=300)
            except subprocess.TimeoutExpired:
                fail("the run did not stop within 300 s of `tandem stop`")
            check(code == 0, f"the stopped run exited {code}: see {scratch}/run.out")
            # After the run the dashboard still serves it, from its files.
            check(fetch_json(url + "api/status")["state"] == "stopped", "status after the stop")
            stop_dashboard(dashboard)

            check_markup_is_text(processes, tandem, scratch)
        passed = True
    finally:
        if passed:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print(f"kept for a look: {scratch}", file=sys.stderr)
    print("dashboard in chromium: ok")


if __name__ == "__main__":
    main()
