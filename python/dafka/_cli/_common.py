"""What the Dafka subcommands share: the ``--towers`` option and its reachability check,
``--host``/``--bind``, the progress line, and running until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from dafka.errors import DafkaError, InvalidArgumentError, TimeoutError
from dafka.zmtp import Socket

DEFAULT_TOWERS = "tcp://127.0.0.1:5556"
_TOWER = re.compile(r"^tcp://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):(\d{1,5})$")


class UnreachableTowerError(DafkaError):
    """No tower of ``--towers`` answered within the time allowed."""


def add_towers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--towers",
        default=DEFAULT_TOWERS,
        help="towers to join: tcp://host:SUBPORT, several separated by commas "
        f"(default {DEFAULT_TOWERS}, as `dafka tower` prints)",
    )
    parser.add_argument(
        "--tower-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="give up if no tower answers within this time (default 5)",
    )


def add_host(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default=None,
        help="the address this node announces: peers connect to it there (default 127.0.0.1; "
        "on a cluster, one the other machines reach)",
    )
    parser.add_argument(
        "--bind",
        default=None,
        metavar="ADDRESS",
        help="where it listens, when not on --host (e.g. 0.0.0.0 behind a NAT, announcing "
        "the outside address with --host)",
    )


def publisher_of(tower: str) -> str:
    """The tower's XPUB endpoint: the port after its XSUB's."""
    m = _TOWER.match(tower.strip())
    if m is None or not 0 < int(m.group(2)) < 65535:
        raise InvalidArgumentError(
            f"bad tower {tower.strip()!r}: expected tcp://host:port (the SUB port; the PUB "
            "port is the next one)"
        )
    return f"tcp://{m.group(1)}:{int(m.group(2)) + 1}"


def check_towers(towers: str, timeout: float) -> None:
    """Waits, at most `timeout` seconds in all, for one tower of `towers` to send its welcome
    (a tower's XPUB greets every subscriber with ``W``); raises UnreachableTowerError if none
    does, so a typo or a stopped tower is reported instead of a node waiting forever."""
    endpoints = [publisher_of(t) for t in towers.split(",") if t.strip()]
    if not endpoints:
        raise InvalidArgumentError("--towers is empty")
    probes = []
    try:
        for endpoint in endpoints:
            probe = Socket("SUB", linger=0, reconnect_ivl=0.1)
            probes.append(probe)
            probe.subscribe(b"W")
            probe.connect(endpoint)
        deadline = time.monotonic() + timeout
        while True:
            for probe in probes:
                try:
                    probe.recv(timeout=0.05)
                    return
                except TimeoutError:
                    pass
            if time.monotonic() >= deadline:
                break
    finally:
        for probe in probes:
            probe.close()
    raise UnreachableTowerError(
        f"no tower answered within {timeout:g} s at {towers} (is `dafka tower` running there? "
        "--towers names its SUB port)"
    )


class Progress:
    """A progress line on stderr, at most once a second: rewritten in place on a terminal,
    one line each time otherwise. Shown on a terminal or when forced (``--progress``)."""

    def __init__(self, what: str, enabled: bool | None, stream: TextIO = sys.stderr) -> None:
        self.what = what
        self.stream = stream
        self.tty = stream.isatty()
        self.enabled = self.tty if enabled is None else enabled
        self.count = 0
        self.started = time.monotonic()
        self.last = self.started
        self.last_count = 0
        self.shown = False

    def add(self, n: int) -> None:
        self.count += n
        if self.enabled:
            now = time.monotonic()
            if now - self.last >= 1.0:
                rate = (self.count - self.last_count) / (now - self.last)
                self.last, self.last_count = now, self.count
                self._write(f"{self.count} records {self.what} ({rate:,.0f}/s)")

    def _write(self, line: str) -> None:
        self.stream.write(f"\r{line}\x1b[K" if self.tty else f"{line}\n")
        self.stream.flush()
        self.shown = True

    def finish(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def add_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line on stderr every second (default: only on a terminal)",
    )


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the command as Ctrl-C does (KeyboardInterrupt)."""

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def wait_for_interrupt() -> None:
    """Blocks until Ctrl-C or SIGTERM."""
    with sigterm_as_interrupt():
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
