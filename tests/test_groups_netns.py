"""A consumer group split by a network partition (docs/groups.md, "What this guarantees"):
two members in two network namespaces joined by a veth pair, the tower and the store beside
the first. With the second member's link down, the first takes every partition after the
session timeout, and the second, hearing nobody, keeps reading what it had and takes the
rest as well (the overlap the docs describe); once the link is up again the group converges
to one owner per partition. The namespaces are made and deleted by the test and have no link
out; skipped, with the reason, where they cannot be made (not root, no iproute2)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import Lab, Proc, netns_unavailable

pytestmark = pytest.mark.skipif((reason := netns_unavailable()) is not None, reason=reason or "")

PORT = "5566"  # inside the namespace: nobody else is there
PARTITIONS = 4

SETUP = """
import sys, dafka
towers = sys.argv[1]
for i in range(int(sys.argv[2])):
    with dafka.Producer("split", towers=towers, host="10.79.0.1") as p:
        p.send(b"x")
        p.flush(timeout=20)
print("PRODUCED", flush=True)
"""

MEMBER = """
import json, sys, time, threading, dafka
towers, host = sys.argv[1:3]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
with dafka.Consumer("split", towers=towers, host=host, offset_reset="earliest",
                    group="split-group", session_timeout=1.0, connect_timeout=None) as c:
    while not stop.is_set():
        c.poll(100, 0.1)
        print("OWNED " + json.dumps(sorted(p for _, p in c.assignment())), flush=True)
"""


@pytest.fixture
def lab() -> Iterator[Lab]:
    with Lab() as lab:
        yield lab


def owned(member: Proc, timeout: float = 20.0, want: int | None = None) -> set[str]:
    """The member's latest assignment once it has `want` partitions (or any, if None)."""
    deadline = time.monotonic() + timeout
    last: set[str] = set()
    while time.monotonic() < deadline:
        words = member.expect(
            lambda w: w[0] == "OWNED", timeout=max(0.1, deadline - time.monotonic())
        )
        last = set(json.loads(" ".join(words[1:])))
        if want is None or len(last) == want:
            # Drop what is queued: the next call reads fresh lines.
            member.pending.clear()
            return last
    raise AssertionError(f"{member.proc.args[-2:]} owned {last}, not {want} partitions")


def test_a_member_cut_off_takes_every_partition_and_the_group_converges_when_healed(
    lab: Lab, tmp_path: Path
) -> None:
    a, b = lab.namespace(), lab.namespace()
    ea, eb = lab.veth(a, b)
    lab.address(a, ea, "10.79.0.1/24")
    lab.address(b, eb, "10.79.0.2/24")
    towers = f"tcp://10.79.0.1:{PORT}"
    dafka = [sys.executable, "-m", "dafka.cli"]
    tower = lab.run(a, [*dafka, "tower", "--sub", towers])
    tower.expect(lambda w: w[0].startswith("tcp://"))
    lab.run(
        a,
        [
            *dafka,
            "store",
            str(tmp_path / "store"),
            "--towers",
            towers,
            "--host",
            "10.79.0.1",
            "--sync",
            "never",
        ],
    )
    setup = lab.run(a, [sys.executable, "-c", SETUP, towers, str(PARTITIONS)])
    setup.expect(lambda w: w[0] == "PRODUCED", timeout=60)
    first = lab.run(a, [sys.executable, "-c", MEMBER, towers, "10.79.0.1"])
    second = lab.run(b, [sys.executable, "-c", MEMBER, towers, "10.79.0.2"])
    one, two = owned(first, want=2), owned(second, want=2)
    assert not one & two, "one owner each"

    lab.link(b, eb, up=False)
    # Each side drops the other after the session timeout: the first takes every partition,
    # and so does the second, which hears nobody (its view is itself alone).
    assert owned(first, want=PARTITIONS) and owned(second, want=PARTITIONS)

    lab.link(b, eb, up=True)
    # Healed: they hear each other again and converge to one owner per partition.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        one, two = owned(first), owned(second)
        if len(one) == 2 and len(two) == 2 and not one & two:
            break
    assert (len(one), len(two)) == (2, 2) and not one & two, (one, two)
    for m in (first, second):
        m.stop()
