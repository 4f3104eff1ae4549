#!/usr/bin/env python3
"""A real Slurm cluster of virtual nodes on this one machine, for tests.

One munged, one slurmctld and one `slurmd -N nX` per virtual node run as child
processes of the caller, with every file (config, key, sockets, state, spool,
logs, pid files) inside `workdir`. Everything listens and connects on
127.0.0.1 only; each daemon gets its own port, picked free at start.

Needs root (slurmd launches tasks as the submitting user and insists on root)
and Debian's slurm-wlm 22.05 (built with multiple-slurmd support, so several
`slurmd -N` can share one host). See README.md for what was measured here.

    with SlurmCluster(tmpdir, nodes=3) as cluster:
        out = cluster.run(["sbatch", "--wait", "--nodes=3", script], timeout=30)

CLI: `slurm_cluster.py up DIR` starts it detached and prints the environment to
export; `slurm_cluster.py down DIR` stops it. Logs stay in DIR for debugging.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMON_BINARIES = ["munged", "slurmctld", "slurmd", "slurmstepd"]
CLIENT_BINARIES = ["sinfo", "srun", "sbatch", "salloc", "scontrol", "scancel", "squeue"]
STATE_FILE = "cluster.json"  # pids and ports, so `down` can find an `up` cluster


class SlurmClusterError(RuntimeError):
    """A client call or a daemon failed; the message carries the log tails."""


def _missing_binaries() -> list[str]:
    return [b for b in DAEMON_BINARIES + CLIENT_BINARIES + ["mungekey"]
            if shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]


def _which(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if found is None:
        raise SlurmClusterError(f"{name} not found")
    return found


def _free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1 right now (all bound at once so none repeats)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """preexec_fn: the daemon gets SIGKILL if the test process dies without cleanup."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no {path.name})"
    return "\n".join(text[-lines:])


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pids_with_env(key: str, value: str) -> list[int]:
    """Processes whose environment holds key=value: the slurmstepd and task
    processes of this cluster (they inherit SLURM_CONF), which slurmd detaches."""
    needle = f"{key}={value}".encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read() + b"\0"
        except OSError:
            continue
        if b"\0" + needle in b"\0" + env:
            found.append(int(entry))
    return found


class SlurmCluster:
    """munged + slurmctld + `nodes` slurmd daemons, all inside `workdir`.

    Not thread-safe. `start()` blocks until sinfo shows every node idle
    (bounded by `ready_timeout` seconds) or raises SlurmClusterError with the
    daemons' log tails. `stop()` cancels jobs, kills every daemon and every
    leftover step process of this cluster, and keeps the logs.
    """

    def __init__(self, workdir: str | os.PathLike, nodes: int = 3, cpus_per_node: int = 4,
                 kill_wait_s: int = 5, ready_timeout: float = 20.0):
        self.dir = Path(workdir).resolve()
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        self.kill_wait_s = kill_wait_s
        self.ready_timeout = ready_timeout
        self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
        self.conf_path = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self._procs: dict[str, subprocess.Popen] = {}
        self._pids: dict[str, int] = {}  # for a cluster started by another process (CLI `down`)
        self._old_handlers: dict[int, object] = {}
        self._reaper: subprocess.Popen | None = None
        self.ready_seconds: float | None = None

    # ----- environment and client calls

    @property
    def env(self) -> dict[str, str]:
        """Environment for every client call: SLURM_CONF, and nothing stale from an outer job."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}
        env["SLURM_CONF"] = str(self.conf_path)
        return env

    def run(self, cmd: list[str], timeout: float = 30.0, check: bool = True,
            input: str | None = None, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
        """Run a client command with SLURM_CONF set; raise with log tails on timeout or failure."""
        try:
            result = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                                    timeout=timeout, input=input, cwd=cwd or self.dir)
        except subprocess.TimeoutExpired as e:
            raise SlurmClusterError(f"timed out after {timeout}s: {' '.join(cmd)}\n"
                                    f"stdout: {e.stdout}\nstderr: {e.stderr}\n{self.log_tails()}") from None
        if check and result.returncode != 0:
            raise SlurmClusterError(f"exit {result.returncode}: {' '.join(cmd)}\n"
                                    f"stdout: {result.stdout}\nstderr: {result.stderr}\n{self.log_tails()}")
        return result

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        paths = sorted((self.dir / "log").glob("*.log")) + [self.dir / "log" / "munged.stdout"]
        for path in paths:
            parts.append(f"--- {path.name}\n{_tail(path, lines)}")
        return "\n".join(parts)

    # ----- lifecycle

    def __enter__(self) -> "SlurmCluster":
        self._install_signal_handlers()
        try:
            self.start()
        except BaseException:
            self.stop()
            self._restore_signal_handlers()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self._restore_signal_handlers()

    def start(self, detach: bool = False) -> None:
        """Write the config, start the daemons, wait for idle nodes.

        detach: daemons outlive this process (CLI `up`); otherwise they get
        SIGKILL when it dies, as a last resort behind stop().
        """
        reason = _static_unavailable_reason()
        if reason:
            raise SlurmClusterError(reason)
        t0 = time.monotonic()
        # A reused dir starts clean: no recovered jobs or drained nodes (-c also says so).
        for sub in ["state", "spool"]:
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        for sub in ["log", "state", "munge", "spool", "run"]:
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # munged wants execute-for-all on the socket's directory (clients connect as any user).
        os.chmod(self.dir / "munge", 0o711)
        for old in (self.dir / "log").glob("*"):
            old.unlink()
        _kill_pids(_pids_with_env("SLURM_CONF", str(self.conf_path)))  # leftovers of a killed run here
        ports = _free_ports(1 + self.nodes)
        if not detach:
            self._start_reaper()
        self._start_munge(detach)
        self._write_config(ctld_port=ports[0], node_ports=ports[1:])
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-f", str(self.conf_path)], detach)
        for name in self.node_names:
            (self.dir / "spool" / name).mkdir(parents=True, exist_ok=True)
            self._spawn(f"slurmd-{name}",
                        [_which("slurmd"), "-D", "-N", name, "-f", str(self.conf_path)], detach)
        self._save_state()
        self._wait_idle(t0)
        self.ready_seconds = time.monotonic() - t0

    def stop(self, cancel_jobs: bool = True) -> None:
        """Cancel jobs, stop daemons, kill leftover step/task processes. Idempotent.

        cancel_jobs=False skips scancel (the reaper: the controller is dying anyway,
        and scancel would spend MessageTimeout retrying it)."""
        if not self._procs and not self._pids:
            self._load_state()
        if cancel_jobs and self._alive("slurmctld"):
            try:
                subprocess.run(["scancel", "--full", "--signal=KILL", "--user=root"], env=self.env,
                               capture_output=True, timeout=5)
                subprocess.run(["scancel", "--user=root"], env=self.env, capture_output=True, timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        # slurmd before slurmctld so nodes do not get marked down and rescheduled.
        order = [n for n in self._names() if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            self._signal(name, signal.SIGTERM)
            self._wait_gone(name, 3.0)
            self._signal(name, signal.SIGKILL)
            self._wait_gone(name, 2.0)
        _kill_pids(_pids_with_env("SLURM_CONF", str(self.conf_path)))
        self._procs.clear()
        self._pids.clear()
        state = self.dir / STATE_FILE
        if state.exists():
            state.unlink()
        if self._reaper is not None:
            self._reaper.stdin.close()
            try:
                self._reaper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._reaper.kill()
            self._reaper = None

    def _start_reaper(self) -> None:
        """A watchdog that outlives a SIGKILLed caller: it blocks on a pipe from
        us and, when the pipe closes, kills this cluster's daemons and the step
        processes that slurmd detached (PR_SET_PDEATHSIG only covers our children)."""
        self._reaper = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "reap", str(self.dir)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def kill_node(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Stop one node's slurmd (simulated node failure). Its running tasks
        live on (slurmstepd is detached), as on a real node whose slurmd died."""
        key = f"slurmd-{name}"
        self._signal(key, sig)
        self._wait_gone(key, 5.0)

    def start_node(self, name: str) -> None:
        """(Re)start one node's slurmd; with ReturnToService=2 a DOWN node returns to service."""
        (self.dir / "spool" / name).mkdir(parents=True, exist_ok=True)
        self._spawn(f"slurmd-{name}", [_which("slurmd"), "-D", "-N", name, "-f", str(self.conf_path)],
                    detach=False)

    # ----- pieces

    def _start_munge(self, detach: bool) -> None:
        key = self.dir / "munge" / "munge.key"
        if not key.exists():
            subprocess.run([_which("mungekey"), "--create", "--keyfile", str(key)],
                           check=True, capture_output=True, timeout=10)
        os.chmod(key, 0o600)
        if self.munge_socket.exists():
            self.munge_socket.unlink()
        # --force: munged refuses some root-owned/permission setups without it;
        # --origin: avoid resolving the host name to a non-loopback address.
        self._spawn("munged", [
            _which("munged"), "--foreground", "--force",
            f"--socket={self.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={self.dir / 'run' / 'munged.pid'}",
            f"--log-file={self.dir / 'log' / 'munged.log'}",
            f"--seed-file={self.dir / 'munge' / 'munged.seed'}",
            "--origin=127.0.0.1",
        ], detach, log_to_file=False)
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            if not self._alive("munged") or time.monotonic() > deadline:
                raise SlurmClusterError(f"munged did not start\n{self.log_tails()}")
            time.sleep(0.05)

    def _write_config(self, ctld_port: int, node_ports: list[int]) -> None:
        d = self.dir
        c = self.cpus_per_node
        lines = [
            "# Written by tests/cluster/slurm_cluster.py; see README.md there.",
            "ClusterName=tandemtest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            # The per-node Port= below overrides this; it is only the default.
            f"SlurmdPort={node_ports[0]}",
            # Bind to the configured 127.0.0.1 addresses instead of 0.0.0.0.
            "CommunicationParameters=NoInAddrAny",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MailProg=/bin/true",
            # Virtual nodes claim more CPUs than the host has: trust the config.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "JobRequeue=1",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool' / '%n'}",
            f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # Short timeouts so failures show within seconds, not minutes.
            "SlurmctldTimeout=10",
            "SlurmdTimeout=10",
            "MessageTimeout=5",
            "TCPTimeout=2",
            f"KillWait={self.kill_wait_s}",
            "UnkillableStepTimeout=30",
            "InactiveLimit=0",
            "MinJobAge=60",
            "BatchStartTimeout=10",
            "CompleteWait=0",
            "Waittime=0",
            "HealthCheckInterval=0",
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            f"NodeName=DEFAULT CPUs={c} Boards=1 SocketsPerBoard=1 CoresPerSocket={c} ThreadsPerCore=1"
            " RealMemory=1024 State=UNKNOWN",
        ]
        for name, port in zip(self.node_names, node_ports):
            lines.append(f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname=localhost Port={port}")
        lines.append(f"PartitionName=debug Nodes={','.join(self.node_names)} Default=YES"
                     " MaxTime=INFINITE State=UP OverSubscribe=NO")
        self.conf_path.write_text("\n".join(lines) + "\n")
        self.ctld_port = ctld_port
        self.node_ports = node_ports

    def _spawn(self, name: str, argv: list[str], detach: bool, log_to_file: bool = True) -> None:
        out = open(self.dir / "log" / f"{name}.stdout", "ab")
        try:
            self._procs[name] = subprocess.Popen(
                argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.dir, start_new_session=True,
                preexec_fn=None if detach else _die_with_parent)
        finally:
            out.close()

    def _wait_idle(self, t0: float) -> None:
        deadline = t0 + self.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            for name in self._names():
                if not self._alive(name):
                    raise SlurmClusterError(f"{name} exited during start\n{self.log_tails()}")
            try:
                r = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], env=self.env,
                                   capture_output=True, text=True, timeout=5)
                last = r.stdout.strip() + r.stderr.strip()
                states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
                if all(states.get(n) == "idle" for n in self.node_names):
                    return
            except (subprocess.TimeoutExpired, ValueError):
                pass
            time.sleep(0.2)
        raise SlurmClusterError(f"nodes not idle after {self.ready_timeout}s; sinfo: {last}\n{self.log_tails()}")

    # ----- process bookkeeping (own children, or pids from cluster.json for `down`)

    def _names(self) -> list[str]:
        return list(self._procs) or list(self._pids)

    def _pid(self, name: str) -> int | None:
        if name in self._procs:
            return self._procs[name].pid
        return self._pids.get(name)

    def _alive(self, name: str) -> bool:
        if name in self._procs:
            return self._procs[name].poll() is None
        pid = self._pids.get(name)
        return pid is not None and _pid_alive(pid)

    def _signal(self, name: str, sig: int) -> None:
        pid = self._pid(name)
        if pid is None or not self._alive(name):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def _wait_gone(self, name: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self._alive(name) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _save_state(self) -> None:
        state = {"pids": {n: p.pid for n, p in self._procs.items()}, "conf": str(self.conf_path)}
        (self.dir / STATE_FILE).write_text(json.dumps(state))

    def _load_state(self) -> None:
        try:
            state = json.loads((self.dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            return
        self._pids = {n: int(p) for n, p in state["pids"].items()}

    # ----- signals: turn SIGTERM/SIGHUP into an exception so __exit__ runs

    def _install_signal_handlers(self) -> None:
        def handler(signum, frame):
            raise SystemExit(128 + signum)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass

    def _restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()


def _static_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: slurmd must run as root to launch job steps"
    missing = _missing_binaries()
    if missing:
        return "Slurm/munge binaries missing: " + " ".join(missing)
    return None


def unavailable_reason(workdir: str | os.PathLike | None = None) -> str | None:
    """Why the cluster cannot be used here, or None. Brings a 1-node cluster up
    and down to check (in `workdir`, or a temporary dir that is then removed)."""
    reason = _static_unavailable_reason()
    if reason:
        return reason
    import tempfile
    with tempfile.TemporaryDirectory(prefix="slurm-probe-") as tmp:
        try:
            with SlurmCluster(workdir or tmp, nodes=1, cpus_per_node=1):
                pass
        except SlurmClusterError as e:
            return f"Slurm cluster did not come up: {str(e)[:2000]}"
    return None


def _main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "reap":  # internal: see SlurmCluster._start_reaper
        sys.stdin.read()
        SlurmCluster(argv[2]).stop(cancel_jobs=False)
        return 0
    if len(argv) < 3 or argv[1] not in ("up", "down"):
        print(f"usage: {argv[0]} up|down DIR [NODES [CPUS_PER_NODE]]", file=sys.stderr)
        return 2
    workdir = Path(argv[2])
    if argv[1] == "down":
        SlurmCluster(workdir).stop()
        return 0
    nodes = int(argv[3]) if len(argv) > 3 else 3
    cpus = int(argv[4]) if len(argv) > 4 else 4
    cluster = SlurmCluster(workdir, nodes=nodes, cpus_per_node=cpus)
    try:
        cluster.start(detach=True)
    except BaseException as e:
        cluster.stop()
        print(f"slurm_cluster: {e}", file=sys.stderr)
        return 1
    print(f"export SLURM_CONF={cluster.conf_path}")
    print(f"# up in {cluster.ready_seconds:.1f}s; stop with: {argv[0]} down {workdir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
