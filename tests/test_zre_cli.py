"""`dafka zre`, the command-line node of issue 12 (like zyre's zpinger), against a
dafka.zre.Node of this process on loopback (127.255.255.255, a UDP port per test)."""

from __future__ import annotations

import signal
import subprocess
import sys

from zre_util import TIMEOUT, expect, free_udp_port

from dafka.zre import Node


def test_cli_joins_a_group_and_prints_events() -> None:
    port = free_udp_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dafka.cli",
            "zre",
            "G",
            "--name",
            "cli",
            "--interface",
            "lo",
            "--port",
            str(port),
            "--interval",
            "0.1",
            "--header",
            "X-CLI=yes",
            "--greet",
            "hi-all",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline().split()
        assert first[0] == "UUID" and first[2] == "cli"
        cli_uuid = first[1]
        with Node("py", interface="lo", port=port, interval=0.1) as node:
            node.join("G")
            enter = expect(node, lambda e: e.type == "ENTER")
            assert (enter.peer_uuid, enter.headers) == (cli_uuid, {"X-CLI": "yes"})
            # zpinger's greetings: a WHISPER on ENTER, a SHOUT once we joined its group.
            assert expect(node, lambda e: e.type == "WHISPER").frames == [b"Hello"]
            assert expect(node, lambda e: e.type == "SHOUT").frames == [b"hi-all"]
            node.shout("G", b"from-py", b"\x00\x01")
            node.whisper(cli_uuid, b"psst")
            lines = []
            while not any(w.startswith("WHISPER") for w in lines):
                lines.append(proc.stdout.readline().strip())
            assert lines[0].split() == ["ENTER", node.uuid, "py", node.endpoint]
            assert f"JOIN {node.uuid} py G" in lines
            assert f"SHOUT {node.uuid} py G from-py 0x0001" in lines
            assert lines[-1] == f"WHISPER {node.uuid} py psst"
        assert proc.stdout.readline().strip() == f"EXIT {node.uuid} py"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT) == 0
        assert proc.stdout.read().splitlines()[-1] == "STOP"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
