"""The "authentication refused" warning is rate-limited per listener (issue 13): a burst of
refused clients logs at most FAILURES_LOGGED_PER_SECOND (10) warnings a second, and how many
were not logged is said once the window is over (at the next connection or refusal) or when
the listener closes."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator

import pytest

import dafka.zmtp

LIMIT = 10


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "authentication refused" in r.getMessage()
    ]


def refuse_one(endpoint: str, public: str) -> str:
    """One client whose key is not allowed; waits for its refusal and returns its public
    key (the listener's warning names it)."""
    other_public, other_secret = dafka.zmtp.curve_keypair()
    with dafka.zmtp.Socket(
        "PUSH",
        linger=0,
        curve_serverkey=public,
        curve_publickey=other_public,
        curve_secretkey=other_secret,
    ) as push:
        monitor = push.monitor()
        push.connect(endpoint)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if monitor.recv(timeout=5)["event"] == "handshake_failed":
                return other_public
        raise AssertionError("the client was not refused")


@contextlib.contextmanager
def refusing_listener(
    caplog: pytest.LogCaptureFixture, burst: int
) -> Iterator[tuple[str, str, float]]:
    """A CURVE PULL that allows nobody, after `burst` refused clients: its endpoint, public
    key and how long the burst took; the listener closes on exit."""
    caplog.set_level(logging.WARNING)
    public, secret = dafka.zmtp.curve_keypair()
    with dafka.zmtp.Socket(
        "PULL", linger=0, curve_server=True, curve_secretkey=secret, authenticator=[]
    ) as pull:
        endpoint = pull.bind("tcp://127.0.0.1:0")
        start = time.monotonic()
        for _ in range(burst):
            refuse_one(endpoint, public)
        yield endpoint, public, time.monotonic() - start


def test_refusal_warnings_are_rate_limited_per_listener(
    caplog: pytest.LogCaptureFixture,
) -> None:
    burst = 3 * LIMIT
    with refusing_listener(caplog, burst) as (endpoint, public, took):
        logged = refusals(caplog)
        # Every refusal within one window beyond the limit was held back (a slow machine may
        # spread the burst over more windows: at most LIMIT per started second).
        windows = int(took) + 1
        assert len(logged) <= LIMIT * windows, (took, logged)
        if took < 1.0:
            assert len(logged) == LIMIT, logged
        held_back = burst - len(logged)
        assert held_back > 0, (took, logged)
        # The next window: its first warning counts the ones not logged since the last one
        # that was (over every window, the counts add up to all that were held back).
        time.sleep(1.1)
        refuse_one(endpoint, public)
        final = refusals(caplog)
        # (said as the next connection arrives once the window is over, or with that refusal)
        assert any("were not logged" in m for m in final[len(logged) :]), final
        counted = [re.search(r"(\d+) earlier refusals", m) for m in final]
        assert sum(int(c.group(1)) for c in counted if c) == held_back, (took, final)
        print(f"burst of {burst} refusals in {took:.2f} s: {len(logged)} warnings")


def test_refusals_held_back_are_said_when_the_listener_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A burst that stops with no later refusal: its count is said at close, not lost.

    Every refusal is either warned of on its own or counted in a "were not logged" warning
    (said when the listener closes, or earlier when a connection arrives after the window is
    over: on a slow machine the burst can outlast its window)."""
    burst = 2 * LIMIT
    public, secret = dafka.zmtp.curve_keypair()
    caplog.set_level(logging.WARNING)
    with dafka.zmtp.Socket(
        "PULL", linger=0, curve_server=True, curve_secretkey=secret, authenticator=[]
    ) as pull:
        endpoint = pull.bind("tcp://127.0.0.1:0")
        clients = {refuse_one(endpoint, public) for _ in range(burst)}
        assert len(refusals(caplog)) < burst

    def accounted() -> tuple[int, int, list[str]]:
        # Warnings of this listener's clients only (a late one of another test's listener
        # may land here too), and the counts of those not logged.
        final = refusals(caplog)
        counts = [re.search(r"(\d+) earlier refusals", m) for m in final]
        alone = sum(1 for m in final if any(f'"{key}"' in m for key in clients))
        return alone, sum(int(c.group(1)) for c in counts if c), final

    deadline = time.monotonic() + 5
    alone, counted, final = accounted()
    while time.monotonic() < deadline and alone + counted < burst:
        time.sleep(0.05)
        alone, counted, final = accounted()
    assert counted > 0, final
    assert alone + counted == burst, final
