"""Consumer groups from Python: members of a group share the partitions of their topics,
commit what they processed to the stores, and a member that starts later resumes from the
group's committed offsets. (docs/groups.md: the sharing and the hand-over are tested at
length in crates/dafka/tests/groups.rs.)"""

from __future__ import annotations

import time
from typing import Any

import pytest

import dafka
from tests.conftest import unique_topic

SESSION = 1.0


def _member(cluster: Any, topic: str, group: str, **kw: Any) -> dafka.Consumer:
    kw.setdefault("session_timeout", SESSION)
    return dafka.Consumer(topic, towers=cluster.towers, offset_reset="earliest", group=group, **kw)


def _until(check: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _produce(cluster: Any, topic: str, partitions: int, records: int) -> list[dafka.Producer]:
    producers = [dafka.Producer(topic, towers=cluster.towers) for _ in range(partitions)]
    for i, p in enumerate(producers):
        p.send_many([f"{i}-{n}".encode() for n in range(records)])
        p.flush(timeout=20)
    return producers


def test_two_members_share_the_partitions_and_a_later_one_resumes_from_the_commit(
    cluster: Any,
) -> None:
    topic = unique_topic("group")
    group = unique_topic("billing")
    producers = _produce(cluster, topic, 4, 5)
    try:
        a = _member(cluster, topic, group, enable_auto_commit=False)
        b = _member(cluster, topic, group, enable_auto_commit=False)
        assert _until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        assert not set(a.assignment()) & set(b.assignment())
        # Heard from outside (no join), and the assignment every member computes.
        with dafka.PartitionReader(cluster.towers) as reader:
            members = reader.group_members(group, wait=1.0, session_timeout=SESSION)
        assert len(members) == 2
        owners = dafka.group_assignment(members, a.assignment() + b.assignment())
        assert sorted(owners.values()) == sorted(members * 2)
        assert len({owners[k] for k in a.assignment()}) == 1
        seen: dict[tuple[str, str], list[int]] = {}
        deadline = time.monotonic() + 20
        while sum(map(len, seen.values())) < 20 and time.monotonic() < deadline:
            for m in (a, b):
                batch = m.poll(100, 0.05)
                for row in batch.to_pylist():
                    key = (row["topic"], row["partition"])
                    assert key in m.assignment()
                    seen.setdefault(key, []).append(row["offset"])
        assert sorted(seen) == sorted(a.assignment() + b.assignment())
        assert all(v == [0, 1, 2, 3, 4] for v in seen.values()), seen
        done = a.commit()
        assert done == dict.fromkeys(a.assignment(), 5)
        assert b.commit(asynchronous=True) is None
        assert _until(lambda: len(a.committed()) == 4)
        assert set(a.committed().values()) == {5}
        a.close()
        b.close()
        # Five more records per partition: a new member of the group starts at the commit.
        for i, p in enumerate(producers):
            p.send_many([f"{i}-late-{n}".encode() for n in range(5)])
            p.flush(timeout=20)
        with _member(cluster, topic, group) as c:
            got: list[int] = []
            deadline = time.monotonic() + 20
            while len(got) < 20 and time.monotonic() < deadline:
                got += c.poll(100, 0.1).column("offset").to_pylist()
            assert sorted(got) == sorted(list(range(5, 10)) * 4), got
    finally:
        for p in producers:
            p.close()


def test_bad_group_arguments_are_refused_at_the_call(cluster: Any) -> None:
    topic = unique_topic("group-bad")
    with pytest.raises(dafka.InvalidArgumentError, match="group"):
        _member(cluster, topic, "")
    with pytest.raises(dafka.InvalidArgumentError, match="group"):
        _member(cluster, topic, "x" * 256)
    with pytest.raises(dafka.InvalidArgumentError, match="start_offsets"):
        _member(cluster, topic, "g", start_offsets={(topic, "0" * 32): 1})
    with pytest.raises(dafka.InvalidArgumentError, match="session_timeout"):
        _member(cluster, topic, "g", session_timeout=0)
    with dafka.Consumer(topic, towers=cluster.towers) as plain:
        assert plain.assignment() == []
        with pytest.raises(dafka.InvalidArgumentError, match="group"):
            plain.commit()
        with pytest.raises(dafka.InvalidArgumentError, match="group"):
            plain.committed()


def test_seek_moves_a_member_back_and_lag_counts_what_is_left(cluster: Any) -> None:
    topic = unique_topic("group-seek")
    producers = _produce(cluster, topic, 1, 10)
    try:
        with _member(cluster, topic, unique_topic("seek"), enable_auto_commit=False) as m:
            assert _until(lambda: len(m.assignment()) == 1)
            ((_, partition),) = m.assignment()
            got: list[int] = []
            deadline = time.monotonic() + 20
            while len(got) < 10 and time.monotonic() < deadline:
                got += m.poll(100, 0.1).column("offset").to_pylist()
            assert got == list(range(10))
            assert m.commit() == {(topic, partition): 10}
            assert _until(lambda: m.lag() == {(topic, partition): 0})
            m.seek(topic, partition, 4)
            again: list[int] = []
            deadline = time.monotonic() + 20
            while len(again) < 6 and time.monotonic() < deadline:
                again += m.poll(100, 0.1).column("offset").to_pylist()
            assert again == list(range(4, 10))
            # A commit after a seek moves the group's offset back (never otherwise).
            m.seek(topic, partition, 7)
            assert m.commit() == {(topic, partition): 7}
            assert m.committed() == {(topic, partition): 7}
            with pytest.raises(dafka.StateError, match="not assigned"):
                m.seek(topic, "0" * 32, 0)
            # Paused: nothing delivered, the partition kept; resumed after the last record
            # polled.
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                got += m.poll(3 - len(got), 0.1).column("offset").to_pylist()
            assert got == [7, 8, 9]
            m.seek(topic, partition, 5)
            m.pause([(topic, partition)])
            assert m.paused() == [(topic, partition)]
            assert m.poll(100, 0.5).num_rows == 0
            assert m.assignment() == [(topic, partition)]
            m.resume([(topic, partition)])
            assert m.paused() == []
            again = []
            deadline = time.monotonic() + 20
            while len(again) < 5 and time.monotonic() < deadline:
                again += m.poll(100, 0.1).column("offset").to_pylist()
            assert again == [5, 6, 7, 8, 9]
            with pytest.raises(dafka.StateError, match="not assigned"):
                m.pause([(topic, partition), (topic, "0" * 32)])
            assert m.paused() == [], "nothing paused when one is refused"
    finally:
        for p in producers:
            p.close()


MEMBER = """
import json, sys, dafka
towers, topic, group = sys.argv[1:4]
with dafka.Consumer(topic, towers=towers, offset_reset="earliest", group=group,
                    session_timeout=1.0, auto_commit_interval=0.2) as c:
    print(json.dumps({"ready": True}), flush=True)
    while True:
        b = c.poll(1000, 0.1)
        if b.num_rows:
            rows = list(zip(b.column("partition").to_pylist(), b.column("offset").to_pylist()))
            print(json.dumps({"rows": rows}), flush=True)
"""


def test_a_member_sigkilled_has_its_partitions_taken_over_from_its_last_commit(
    cluster: Any,
) -> None:
    import json
    import signal
    import subprocess
    import sys
    import threading

    topic = unique_topic("group-kill")
    group = unique_topic("kill")
    producers = _produce(cluster, topic, 4, 20)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MEMBER, cluster.towers, topic, group],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    seen: list[list[tuple[str, int]]] = [[], []]

    def follow(i: int) -> None:
        out = procs[i].stdout
        assert out is not None
        for line in out:
            seen[i].extend((p, o) for p, o in json.loads(line).get("rows", []))

    threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        assert _until(lambda: len(set(seen[0]) | set(seen[1])) == 80), (seen[0], seen[1])
        victim = {p for p, _ in seen[0]}
        assert victim and not victim & {p for p, _ in seen[1]}, "shared, one owner each"
        # The victim polls on: what it read is committed within its auto-commit interval.
        with dafka.PartitionReader(cluster.towers) as reader:
            assert _until(lambda: len(reader.committed(group)) == 4)
            committed = {p: o for (_, p), o in reader.committed(group).items()}
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        for i, p in enumerate(producers):
            p.send_many([f"{i}-late-{n}".encode() for n in range(20)])
            p.flush(timeout=20)
        assert _until(lambda: len(set(seen[0]) | set(seen[1])) == 160, 30), "all read"
        assert {p for p, o in seen[1] if o >= 20} == {p for p, _ in seen[0] + seen[1]}
        both = [r for r in seen[1] if r in set(seen[0])]
        assert all(p in victim and o >= committed[p] for p, o in both), (both, committed)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for p in producers:
            p.close()


def test_on_assign_and_on_revoke_are_called_from_poll(cluster: Any) -> None:
    topic = unique_topic("group-cb")
    group = unique_topic("cb")
    producers = _produce(cluster, topic, 2, 1)
    calls: list[tuple[str, list[tuple[str, str]]]] = []
    try:

        def member(name: str) -> dafka.Consumer:
            return _member(
                cluster,
                topic,
                group,
                on_assign=lambda c, ps: calls.append((f"{name}+", sorted(ps))),
                on_revoke=lambda c, ps: calls.append((f"{name}-", sorted(ps))),
            )

        with member("a") as a:
            assert _until(lambda: a.poll(10, 0.05) is not None and len(a.assignment()) == 2)
            a.poll(10, 0.05)
            everything = sorted(a.assignment())
            assert ("a+", everything) in calls
            with member("b") as b:
                assert _until(
                    lambda: (
                        a.poll(10, 0.01) is not None
                        and b.poll(10, 0.01) is not None
                        and len(a.assignment()) == 1
                        and len(b.assignment()) == 1
                    )
                )
                a.poll(10, 0.05)
                b.poll(10, 0.05)
                moved = b.assignment()
                assert ("a-", moved) in calls, calls
                assert ("b+", moved) in calls, calls
        with pytest.raises(dafka.InvalidArgumentError, match="need a consumer group"):
            dafka.Consumer(topic, towers=cluster.towers, on_assign=lambda c, p: None)
        with pytest.raises(dafka.InvalidArgumentError, match="callable"):
            _member(cluster, topic, group, on_revoke=3)
    finally:
        for p in producers:
            p.close()


def test_a_group_commit_with_no_store_reachable_is_a_timeout() -> None:
    """No store answers: `committed()` and `commit()` raise `dafka.TimeoutError` (a wait that
    ran out, as for a producer's flush), not a bare `DafkaError`."""
    with (
        dafka.Tower(sub="tcp://127.0.0.1:0") as tower,
        dafka.Consumer(
            unique_topic("nostore"),
            towers=tower.towers,
            group=unique_topic("nostore"),
            session_timeout=SESSION,
            enable_auto_commit=False,
        ) as c,
    ):
        with pytest.raises(dafka.TimeoutError, match="no store answered"):
            c.committed(timeout=0.5)
