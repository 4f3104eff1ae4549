#!/usr/bin/env python3
"""tandem across hosts, simulated by network namespaces this test makes (netns_hosts.py):
the controller on 10.77.0.1 (launcher.kind: external, CURVE on by default off loopback),
workers started from RUN_DIR/workers.txt on three other "hosts" by a supervisor that
restarts a worker process when it exits (as Kubernetes or systemd would). Weight sync
`auto` must pick `collective` across hosts; the learners' Gloo group spans two hosts and
meets at a TCP store on learner-0's address.
Midway the link of the host with rollout-1 goes down for a few seconds: the heartbeats
notice, the controller restarts the worker, and the run finishes.

Network rule: every connection is between the test's own namespaces; the root namespace
connects to nothing. Usage: test_multihost.py TANDEM_BINARY. Exit 77 with the reason when
namespaces cannot be made here.
"""

import json
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import Failure, check  # noqa: E402
from netns_hosts import NetnsHosts, unavailable_reason  # noqa: E402

SKIP = 77
PORT = 29400
STEPS = 14
PLACEMENT = {"rollout-0": "w1", "learner-0": "w1", "learner-1": "w2", "rollout-1": "w3"}
CONFIG = f"""
experiment: {{name: multihost, seed: 1, steps: {STEPS}, checkpoint_every: 4, keep_checkpoints: 2}}
model:      {{path: "builtin:tiny", dtype: float32}}
data:       {{train: "builtin:addition1", prompt_key: prompt, batch_size: 8}}
algorithm:  {{advantage: grpo, group_size: 4}}
rollout:    {{workers: 2, device: cpu, max_new_tokens: 4, threads: 1, kv_cache_mb: 8}}
learner:    {{workers: 2, device: cpu, sharding: ddp, micro_batch_size: 16, threads: 1}}
reward:     [{{name: math_answer, weight: 1.0}}]
weight_sync: {{method: auto, timeout_s: 20}}
placement:  disaggregated
launcher:
  kind: external
  host: 10.77.0.1
  port: {PORT}
  heartbeat_interval_s: 0.5
  heartbeat_timeout_s: 2
  register_timeout_s: 40
  command_timeout_s: 60
logging:    {{console: plain}}
"""


def worker_name(argv: list[str]) -> str:
    return f"{argv[argv.index('--role') + 1]}-{argv[argv.index('--rank') + 1]}"


class Supervisor:
    """Starts each worker on its host and starts it again when it exits (bounded)."""

    def __init__(self, hosts: NetnsHosts, logs: Path):
        self.hosts = hosts
        self.logs = logs
        self.argv: dict[str, list[str]] = {}
        self.processes: dict[str, subprocess.Popen] = {}
        self.starts: dict[str, int] = {}

    def add(self, argv: list[str]) -> None:
        name = worker_name(argv)
        if name not in self.argv:
            self.argv[name] = argv
            self.start(name)

    def start(self, name: str) -> None:
        self.starts[name] = self.starts.get(name, 0) + 1
        if self.starts[name] > 8:
            raise Failure(f"{name} was started 8 times")
        out = open(self.logs / f"supervised-{name}.out", "a")
        self.processes[name] = subprocess.Popen(self.hosts.command(PLACEMENT[name], self.argv[name]),
                                                stdout=out, stderr=subprocess.STDOUT)

    def tend(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                self.start(name)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in self.processes.values():
            process.wait(timeout=10)


def steps_done(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    return sum(1 for line in metrics.read_text().splitlines() if line.strip()) if metrics.exists() else 0


def run(tandem: str, hosts: NetnsHosts, work: Path) -> None:
    config = work / "multihost.yaml"
    config.write_text(CONFIG)
    run_dir = work / "run"
    controller_out = open(work / "controller.out", "w")
    controller = subprocess.Popen(hosts.command("controller", [tandem, "run", str(config), "--run-dir", str(run_dir)]),
                                  stdout=controller_out, stderr=subprocess.STDOUT)
    supervisor = Supervisor(hosts, work)
    partitioned = False
    deadline = time.monotonic() + 300
    try:
        while controller.poll() is None:
            check(time.monotonic() < deadline, "the run did not finish within 300 s")
            commands = run_dir / "workers.txt"
            if commands.exists():
                for line in commands.read_text().splitlines():
                    if line.strip():
                        supervisor.add(shlex.split(line))
            supervisor.tend()
            if not partitioned and steps_done(run_dir) >= 4:
                hosts.link_down("w3")  # rollout-1's host drops off the network...
                time.sleep(5)          # ...for longer than the heartbeat timeout
                hosts.link_up("w3")
                partitioned = True
            time.sleep(0.2)
    finally:
        if controller.poll() is None:
            controller.send_signal(signal.SIGKILL)
            controller.wait(timeout=10)
        supervisor.stop()
    log = (run_dir / "logs" / "controller-0.log").read_text() if (run_dir / "logs" / "controller-0.log").exists() else ""
    explain = f"\n--- controller output ---\n{(work / 'controller.out').read_text()[-3000:]}\n" \
              f"--- controller-0.log ---\n{log[-6000:]}"
    check(controller.returncode == 0, f"the controller exited {controller.returncode}{explain}")
    check(partitioned, f"the run ended before the partition{explain}")
    check(steps_done(run_dir) == STEPS, f"{steps_done(run_dir)} metric rows, want {STEPS}{explain}")
    check(json.loads((run_dir / "finished.json").read_text()).get("steps") == STEPS, "finished.json")
    check(f"control plane tcp://10.77.0.1:{PORT} (CURVE" in log, f"the control plane was not CURVE{explain}")
    for name, host in PLACEMENT.items():
        check(re.search(rf"{name} registered \(pid \d+ on \S+, {re.escape(hosts.address(host))}\)", log) is not None,
              f"{name} did not register from {hosts.address(host)}{explain}")
    check("weight sync: new collective group" in log, f"weight sync auto did not pick collective{explain}")
    check(re.search(rf"learner group of 2 ranks meets at tcp://{re.escape(hosts.address('w1'))}:\d+", log) is not None,
          f"the learners' rendezvous is not learner-0's TCP store{explain}")
    check(re.search(r"rollout-1 .*(heartbeat|died).*restarting it", log) is not None,
          f"the partition was not noticed and recovered{explain}")
    print(f"ok: {STEPS} steps over 4 namespaces; rollout-1's host partitioned for 5 s and recovered "
          f"(worker starts: {supervisor.starts})")


def main() -> int:
    tandem = sys.argv[1]
    reason = unavailable_reason()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="tandem-multihost-") as tmp:
        try:
            with NetnsHosts(["controller", "w1", "w2", "w3"]) as hosts:
                run(tandem, hosts, Path(tmp))
        except Failure as e:
            print(f"FAIL: {e}")
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
