"""The `dafka tower | store | produce | consume` commands, run as subprocesses on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import beacon_endpoints

DAFKA = [sys.executable, "-m", "dafka.cli"]


def dafka(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DAFKA, *args], input=stdin, capture_output=True, timeout=timeout, check=False
    )


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


@pytest.fixture(scope="module")
def towers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `dafka tower` and a `dafka store` process; yields the --towers string."""
    tower = subprocess.Popen(
        [*DAFKA, "tower", "--sub", "tcp://127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    store = None
    try:
        assert tower.stdout is not None
        line = tower.stdout.readline().decode().strip()
        assert line.startswith("tcp://127.0.0.1:"), line
        store = subprocess.Popen(
            [*DAFKA, "store", str(tmp_path_factory.mktemp("store")), "--towers", line],
            stderr=subprocess.PIPE,
        )
        yield line
    finally:
        if store is not None:
            assert stop(store) == 0
        assert stop(tower, signal.SIGINT) == 0


@pytest.mark.parametrize("command", ["tower", "store", "produce", "consume", "groups"])
def test_help(command: str) -> None:
    out = dafka(command, "--help")
    assert out.returncode == 0
    assert out.stdout.startswith(f"usage: dafka {command}".encode())
    if command != "tower":
        assert b"--towers" in out.stdout


def test_top_level_help_lists_the_commands() -> None:
    out = dafka("--help")
    assert out.returncode == 0
    for command in (b"tower", b"store", b"produce", b"consume", b"groups"):
        assert command in out.stdout


def test_produce_then_consume_from_beginning_round_trip(towers: str) -> None:
    lines = [f"line {i} \u00e9".encode() for i in range(5000)] + [b"", b"last"]
    produced = dafka("produce", "t-round", "--towers", towers, stdin=b"\n".join(lines) + b"\n")
    assert produced.returncode == 0, produced.stderr
    assert b"5002 records sent and acknowledged, offsets 0..5001" in produced.stderr
    consumed = dafka(
        "consume", "t-round", "--towers", towers, "--from-beginning", "--max-records", "5002"
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split(b"\n")[:-1] == lines
    assert b"processed 5002 records" in consumed.stderr


def test_consume_json_lines_and_idle_timeout(towers: str) -> None:
    produced = dafka(
        "produce", "t-json", "--towers", towers, stdin=b"hello\n\xff\xfe\r\nno newline"
    )
    assert produced.returncode == 0, produced.stderr
    start = time.monotonic()
    consumed = dafka(
        "consume", "t-json", "--towers", towers, "--from-beginning", "--json", "--idle-timeout", "1"
    )
    assert consumed.returncode == 0, consumed.stderr
    assert time.monotonic() - start < 30
    rows = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [r["offset"] for r in rows] == [0, 1, 2]
    assert rows[0]["value"] == "hello"
    assert rows[1]["value_base64"] == "//4="  # not UTF-8 (and the \r of \r\n dropped)
    assert rows[2]["value"] == "no newline"
    assert {r["topic"] for r in rows} == {"t-json"}
    assert len({r["partition"] for r in rows}) == 1
    assert all(r["timestamp"].endswith("+00:00") for r in rows)


def test_a_latest_consumer_prints_only_new_records_and_shows_progress(towers: str) -> None:
    # Stored before the consumer starts, by a producer gone since: not printed, not even the
    # partition's head record (its help says "only new records").
    stored = dafka("produce", "t-live", "--towers", towers, stdin=b"old1\nold2\n")
    assert stored.returncode == 0
    consumer = subprocess.Popen(
        [*DAFKA, "consume", "t-live", "--towers", towers, "--max-records", "3", "--progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Keep producing until the consumer has joined and got three records.
        deadline = time.monotonic() + 30
        while consumer.poll() is None and time.monotonic() < deadline:
            dafka("produce", "t-live", "--towers", towers, stdin=b"new\n" * 2000)
        out, err = consumer.communicate(timeout=20)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert consumer.returncode == 0, err
    lines = out.splitlines()
    assert lines == [b"new"] * 3
    assert b"processed 3 records" in err


def test_a_latest_consumer_of_the_stored_partition_gets_its_next_record_only(
    towers: str,
) -> None:
    # The consumer meets the stored partition through the stores' heads before any new
    # record: it starts after the head, and the next record of that same partition is the
    # first printed.
    first = subprocess.Popen(
        [*DAFKA, "produce", "t-next", "--towers", towers],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert first.stdin is not None and first.stderr is not None
    first.stdin.write(b"old1\nold2\n")
    first.stdin.flush()
    # Both stored before the consumer starts (a consumer up before they were sent gets them
    # live, rightly: they would be new to it).
    deadline = time.monotonic() + 30
    while True:
        stored = dafka(
            "consume", "t-next", "--towers", towers, "--from-beginning", "--max-records", "2"
        )
        if stored.returncode == 0 or time.monotonic() > deadline:
            break
        assert b"no store holds topic 't-next'" in stored.stderr, stored.stderr
    assert stored.stdout == b"old1\nold2\n", stored.stderr
    consumer = subprocess.Popen(
        [*DAFKA, "consume", "t-next", "--towers", towers, "--max-records", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(3)  # the consumer has heard the partition's HEAD (every second)
        first.stdin.write(b"new\n")
        first.stdin.close()
        assert first.wait(timeout=30) == 0
        out, err = consumer.communicate(timeout=30)
    finally:
        for proc in (first, consumer):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert out == b"new\n", err


def test_consume_from_beginning_of_a_topic_no_store_holds_fails_and_says_so(
    towers: str,
) -> None:
    held = dafka("produce", "events", "--towers", towers, stdin=b"e\n")
    assert held.returncode == 0, held.stderr
    start = time.monotonic()
    out = dafka("consume", "evnets", "--towers", towers, "--from-beginning", timeout=30)
    assert time.monotonic() - start < 15
    assert out.returncode == 1, out.stderr
    assert b"dafka consume: error: no store holds topic 'evnets'" in out.stderr, out.stderr
    assert out.stderr.count(b"no store holds topic") == 1, out.stderr
    assert b"Traceback" not in out.stderr
    # A topic held is read as before.
    ok = dafka("consume", "events", "--towers", towers, "--from-beginning", "--max-records", "1")
    assert ok.returncode == 0, ok.stderr


def test_consume_of_new_records_of_a_topic_no_store_holds_says_so_and_waits(
    towers: str,
) -> None:
    out = dafka("consume", "t-not-yet", "--towers", towers, "--idle-timeout", "3")
    assert out.returncode == 0, out.stderr
    assert (
        b"dafka consume: no store holds topic 't-not-yet' yet; waiting for new records"
        in out.stderr
    ), out.stderr
    assert out.stderr.count(b"no store holds topic") == 1, out.stderr


def test_host_is_what_a_cli_store_announces(towers: str, tmp_path: Path) -> None:
    store = subprocess.Popen(
        [*DAFKA, "store", str(tmp_path / "s"), "--towers", towers, "--host", "127.0.0.2"],
        stderr=subprocess.PIPE,
    )
    try:
        endpoints = set()
        deadline = time.monotonic() + 15
        while not any(e.startswith("tcp://127.0.0.2:") for e in endpoints):
            assert time.monotonic() < deadline, endpoints
            endpoints |= beacon_endpoints(towers, within=1.0)
    finally:
        assert stop(store) == 0
    assert b"announced as 127.0.0.2" in store.stderr.read()


def test_progress_line_on_a_long_run(towers: str) -> None:
    # 1.5 s of input at a steady pace: the forced progress line appears at least once.
    script = "import sys,time\nfor i in range(15):\n print(i, flush=True); time.sleep(0.1)\n"
    feeder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    produced = subprocess.run(
        [*DAFKA, "produce", "t-progress", "--towers", towers, "--progress"],
        stdin=feeder.stdout,
        capture_output=True,
        timeout=60,
        check=False,
    )
    feeder.wait()
    assert produced.returncode == 0, produced.stderr
    assert b"records sent (" in produced.stderr
    # Not forced and not a terminal: no progress line.
    quiet = dafka("produce", "t-progress", "--towers", towers, stdin=b"x\n")
    assert b"records sent (" not in quiet.stderr


@pytest.mark.parametrize("command", ["produce", "consume", "store"])
def test_an_unreachable_tower_is_reported_in_bounded_time(command: str, tmp_path: Path) -> None:
    # Port 1 on loopback: nothing listens (a closed port refuses at once; --tower-timeout
    # bounds the wait in every case).
    args = {"produce": ["t"], "consume": ["t"], "store": [str(tmp_path / "s")]}[command]
    start = time.monotonic()
    out = dafka(command, *args, "--towers", "tcp://127.0.0.1:1", "--tower-timeout", "1")
    assert time.monotonic() - start < 15
    assert out.returncode == 1
    assert b"no tower answered within 1 s at tcp://127.0.0.1:1" in out.stderr
    assert b"Traceback" not in out.stderr


def test_bad_towers_and_bad_path_are_clear_errors(towers: str, tmp_path: Path) -> None:
    bad = dafka("produce", "t", "--towers", "udp://x:1")
    assert bad.returncode == 1
    assert b"bad tower 'udp://x:1'" in bad.stderr
    a_file = tmp_path / "file"
    a_file.write_bytes(b"not a directory")
    store = dafka("store", str(a_file), "--towers", towers)
    assert store.returncode == 1
    assert f"dafka store: error: cannot open the store at {str(a_file)!r}".encode() in store.stderr
    assert b"Traceback" not in store.stderr
    # A file on the way to the directory: named too (it was "Not a directory (os error 20)").
    below = dafka("store", str(a_file / "store"), "--towers", towers)
    assert below.returncode == 1
    assert f"{a_file} is a file, not a directory".encode() in below.stderr, below.stderr
    assert b"os error" not in below.stderr
    sync = dafka("store", str(tmp_path / "s"), "--towers", towers, "--sync", "sometimes")
    assert sync.returncode == 2
    assert b"expected always, never or an interval in seconds" in sync.stderr


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_ctrl_c_stops_a_consumer_cleanly(towers: str) -> None:
    consumer = subprocess.Popen(
        [*DAFKA, "consume", "t-quiet", "--towers", towers],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)
    assert stop(consumer, signal.SIGINT) == 0
    assert consumer.stderr is not None
    assert b"processed 0 records" in consumer.stderr.read()


def test_consume_as_a_group_commits_and_groups_shows_the_lag(towers: str) -> None:
    def groups() -> list[dict]:
        out = dafka("groups", "g-cli", "--towers", towers, "--json", "--session-timeout", "1")
        assert out.returncode == 0, out.stderr
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert lines[0] == {"group": "g-cli", "members": []}, "nobody in the group now"
        return lines[1:]

    assert groups() == []
    sent = dafka(
        "produce", "t-grp", "--towers", towers, stdin=b"".join(b"a%d\n" % i for i in range(10))
    )
    assert sent.returncode == 0, sent.stderr
    group = ["--group", "g-cli", "--session-timeout", "1"]
    first = dafka(
        "consume", "t-grp", "--towers", towers, "--from-beginning", *group, "--max-records", "10"
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == [b"a%d" % i for i in range(10)]
    (row,) = groups()
    assert (row["topic"], row["committed"], row["end"], row["lag"]) == ("t-grp", 10, 10, 0)
    # A second `dafka produce` is a new producer: a new partition, with no commit yet.
    sent = dafka("produce", "t-grp", "--towers", towers, stdin=b"b0\nb1\nb2\n")
    assert sent.returncode == 0, sent.stderr
    rows = groups()
    assert sorted((r["committed"] or -1, r["lag"]) for r in rows) == [(-1, 3), (10, 0)], rows
    # The group resumes at its commit in the first, from the earliest in the new one.
    again = dafka(
        "consume", "t-grp", "--towers", towers, "--from-beginning", *group, "--max-records", "3"
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == [b"b0", b"b1", b"b2"]
    assert sorted((r["committed"], r["lag"]) for r in groups()) == [(3, 0), (10, 0)]
    table = dafka("groups", "g-cli", "--towers", towers, "--session-timeout", "1")
    assert b"COMMITTED" in table.stdout and b"t-grp" in table.stdout, table
    assert b"0 members heard" in table.stdout, table


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_groups_without_a_name_lists_the_groups_committed_and_the_groups_heard(
    towers: str,
) -> None:
    sent = dafka("produce", "t-list", "--towers", towers, stdin=b"x0\nx1\n")
    assert sent.returncode == 0, sent.stderr
    group = ["--session-timeout", "1", "--max-records", "2", "--from-beginning"]
    done = dafka("consume", "t-list", "--towers", towers, "--group", "g-list", *group)
    assert done.returncode == 0, done.stderr
    # A member running, of a topic nothing was written to: heard, with nothing committed.
    member = subprocess.Popen(
        [
            *DAFKA,
            "consume",
            "t-list-empty",
            "--towers",
            towers,
            "--group",
            "g-heard",
            "--session-timeout",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            out = dafka("groups", "--towers", towers, "--json", "--session-timeout", "1")
            assert out.returncode == 0, out.stderr
            lines = [json.loads(line) for line in out.stdout.splitlines()]
            heads = {line["group"]: line["members"] for line in lines if "members" in line}
            if len(heads.get("g-heard", [])) == 1 or time.monotonic() > deadline:
                break
        assert heads.get("g-list") == [], lines
        assert len(heads.get("g-heard", [])) == 1, lines
        rows = [line for line in lines if line.get("group") == "g-list" and "topic" in line]
        assert [(r["topic"], r["committed"], r["lag"]) for r in rows] == [("t-list", 2, 0)]
        assert not [line for line in lines if line.get("group") == "g-heard" and "topic" in line]
        table = dafka("groups", "--towers", towers, "--session-timeout", "1")
        assert b"group g-list: 0 members heard" in table.stdout, table
        assert b"no committed offset of group 'g-heard'" in table.stdout, table
    finally:
        assert stop(member, signal.SIGINT) == 0


def test_a_group_member_of_a_topic_no_store_holds_fails_from_beginning(towers: str) -> None:
    out = dafka(
        "consume", "t-grp-typo", "--towers", towers, "--from-beginning",
        "--group", "g-typo", "--session-timeout", "1", "--idle-timeout", "20",
    )  # fmt: skip
    assert out.returncode == 1, out
    assert b"no store holds topic 't-grp-typo'" in out.stderr, out.stderr
