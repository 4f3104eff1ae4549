"""Simulated hosts for tests: Linux network namespaces made by the test itself.

One namespace holds a bridge; each "host" namespace gets a veth pair whose other end is
on that bridge, an address 10.77.0.N/24 and its own loopback. Nothing is routed out of
the machine: the namespaces have no default route, and the root namespace (which has
one) never connects to any of them.

    with NetnsHosts(["controller", "w1", "w2"]) as hosts:
        hosts.address("w1")              # "10.77.0.2"
        hosts.command("w1", ["tandem", ...])   # argv that runs inside w1
        hosts.link_down("w1"); hosts.link_up("w1")   # a partition of w1
"""

import os
import subprocess
from typing import Optional

SUBNET = "10.77.0"


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, timeout: float = 10) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def unavailable_reason() -> Optional[str]:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if subprocess.run(["sh", "-c", "command -v ip"], capture_output=True).returncode != 0:
        return "iproute2 (ip) is not installed"
    probe = f"tnd-probe-{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (NetnsError, subprocess.TimeoutExpired) as e:
        return f"cannot create a network namespace: {e}"
    try:
        _ip("netns", "del", probe)
    except NetnsError:
        pass
    return None


class NetnsHosts:
    def __init__(self, names: list[str]):
        self.names = list(names)
        tag = os.getpid() % 100000
        self.bridge_ns = f"tnd-br-{tag}"
        self.ns = {name: f"tnd-{name}-{tag}" for name in self.names}
        self.veth = {name: (f"v{i}h{tag}"[:15], f"v{i}b{tag}"[:15]) for i, name in enumerate(self.names)}
        self.created: list[str] = []

    def address(self, name: str) -> str:
        return f"{SUBNET}.{self.names.index(name) + 1}"

    def command(self, name: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[name], *argv]

    def run(self, name: str, argv: list[str], timeout: float = 10) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(name, argv), capture_output=True, text=True, timeout=timeout)

    def link_down(self, name: str) -> None:
        _ip("-n", self.bridge_ns, "link", "set", self.veth[name][1], "down")

    def link_up(self, name: str) -> None:
        _ip("-n", self.bridge_ns, "link", "set", self.veth[name][1], "up")

    def __enter__(self) -> "NetnsHosts":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        _ip("netns", "add", self.bridge_ns)
        self.created.append(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for name in self.names:
            ns = self.ns[name]
            host_end, bridge_end = self.veth[name]
            _ip("netns", "add", ns)
            self.created.append(ns)
            # Made inside the host's namespace, so neither end ever sits in the root namespace.
            _ip("-n", ns, "link", "add", host_end, "type", "veth", "peer", "name", bridge_end, "netns", self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "set", bridge_end, "master", "br0")
            _ip("-n", self.bridge_ns, "link", "set", bridge_end, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(name)}/24", "dev", host_end)
            _ip("-n", ns, "link", "set", host_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def close(self) -> None:
        # Deleting a namespace kills nothing: the caller ends its processes first. Its veth
        # ends go with it.
        for ns in reversed(self.created):
            try:
                _ip("netns", "del", ns)
            except (NetnsError, subprocess.TimeoutExpired):
                pass
        self.created.clear()
