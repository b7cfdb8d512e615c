"""Network namespaces for the ZRE tests: created and removed by the test, so beacons (UDP
broadcast and multicast) can cross real interfaces without ever reaching the host's.

A :class:`Lab` makes namespaces named ``dz<pid>-<n>`` (lo up in each), joins them by veth
pairs or through a bridge in a hub namespace, runs processes inside them (``ip netns exec``)
and, on exit, kills those processes and deletes every namespace it made (their veths go with
them). Needs root and ``ip``; :func:`lab_or_skip` skips the test, saying why, when namespaces
cannot be made here.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Self


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here, or None."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"dz{os.getpid()}-probe"
    try:
        ip("netns", "add", probe)
    except subprocess.CalledProcessError as e:
        return f"`ip netns add` failed: {e.stderr.strip()}"
    ip("netns", "del", probe)
    return None


class Proc:
    """A process in a namespace, its stdout read line by line on a thread."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.pending: list[list[str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, match: Callable[[list[str]], bool], timeout: float = 20.0) -> list[str]:
        """The first line, earlier unmatched ones included, that `match`es; it is consumed,
        the others stay for later expectations."""
        for i, words in enumerate(self.pending):
            if match(words):
                return self.pending.pop(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                words = self.lines.get(timeout=0.1).split(" ")
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            if match(words):
                return words
            self.pending.append(words)
        raise AssertionError(f"no matching line from {self.proc.args}; saw {self.pending}")

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            try:
                self.send("STOP")
                return self.proc.wait(timeout=timeout)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
        return self.proc.wait()


class Lab:
    """Namespaces, links and processes, all removed on exit."""

    def __init__(self) -> None:
        self.prefix = f"dz{os.getpid()}"
        self.namespaces: list[str] = []
        self.procs: list[Proc] = []
        self._links = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.kill()
            p.proc.wait()
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)

    def namespace(self) -> str:
        ns = f"{self.prefix}-{len(self.namespaces)}"
        ip("netns", "add", ns)
        self.namespaces.append(ns)
        ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def veth(self, a: str, b: str) -> tuple[str, str]:
        """A veth pair between namespaces `a` and `b`, both ends up; returns their names."""
        self._links += 1
        ea, eb = f"va{self._links}", f"vb{self._links}"
        ip("link", "add", ea, "netns", a, "type", "veth", "peer", "name", eb, "netns", b)
        ip("-n", a, "link", "set", ea, "up")
        ip("-n", b, "link", "set", eb, "up")
        return ea, eb

    def address(self, ns: str, dev: str, cidr: str) -> None:
        extra = ["nodad"] if ":" in cidr else []
        ip("-n", ns, "addr", "add", cidr, "dev", dev, *extra)

    def bridge(self, hub: str) -> str:
        ip("-n", hub, "link", "add", "br0", "type", "bridge")
        ip("-n", hub, "link", "set", "br0", "up")
        return "br0"

    def plug(self, hub: str, ns: str, cidr: str) -> tuple[str, str]:
        """Connects `ns` to the hub's bridge with address `cidr`; returns (hub end, ns end)."""
        h, n = self.veth(hub, ns)
        ip("-n", hub, "link", "set", h, "master", "br0")
        self.address(ns, n, cidr)
        return h, n

    def link(self, ns: str, dev: str, up: bool) -> None:
        ip("-n", ns, "link", "set", dev, "up" if up else "down")

    def run(self, ns: str, argv: Sequence[str]) -> Proc:
        p = Proc(["ip", "netns", "exec", ns, *argv])
        self.procs.append(p)
        return p
