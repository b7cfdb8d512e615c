"""dafka.zre.Node in CURVE mode (43/ZRE version 3, issue 13) on loopback: CURVE nodes find
each other and talk; a plaintext node and a CURVE node whose key is not allowed share their
beacon port and see nothing of them, nor they of it. Also the `dafka zre` CLI flags.

Every node beacons to 127.255.255.255 on a UDP port picked per test (never 5670).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import pytest
from zre_util import TIMEOUT, expect, free_udp_port

from dafka.zmtp import curve_keypair
from dafka.zre import Event, Node


def drain(node: Node, seconds: float) -> list[Event]:
    """Every event within ``seconds``."""
    deadline = time.monotonic() + seconds
    seen = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            seen.append(node.recv(timeout=left))
        except TimeoutError:
            break
    return seen


def lo(name: str, port: int, **kw: object) -> Node:
    return Node(name, interface="lo", port=port, interval=0.1, **kw)  # type: ignore[arg-type]


def test_curve_nodes_talk_and_outsiders_see_nothing() -> None:
    port = free_udp_port()
    (pa, sa), (pb, sb) = curve_keypair(), curve_keypair()
    allowed = [pa, pb]
    a = lo("a", port, curve_secretkey=sa, curve_publickey=pa, allowed_keys=allowed)
    b = lo("b", port, curve_secretkey=sb, allowed_keys=allowed)
    plain = lo("plain", port)
    _, stranger_secret = curve_keypair()
    stranger = lo("stranger", port, curve_secretkey=stranger_secret)
    with a, b, plain, stranger:
        for n in (a, b, plain, stranger):
            n.join("G")
        enter = expect(a, lambda e: e.type == "ENTER")
        assert enter.peer_uuid == b.uuid
        assert enter.headers["X-PUBLICKEY"] == pb
        expect(b, lambda e: e.type == "ENTER" and e.peer_uuid == a.uuid)
        expect(a, lambda e: e.type == "JOIN" and e.group == "G")
        expect(b, lambda e: e.type == "JOIN" and e.group == "G")
        a.shout("G", b"to all", b"two")
        shout = expect(b, lambda e: e.type == "SHOUT")
        assert (shout.peer_uuid, shout.frames) == (a.uuid, [b"to all", b"two"])
        b.whisper(a.uuid, b"to you")
        whisper = expect(a, lambda e: e.type == "WHISPER")
        assert (whisper.peer_uuid, whisper.frames) == (b.uuid, [b"to you"])

        # Twenty beacon intervals more: no other ENTER anywhere.
        seen = {n.name: drain(n, 2.0 if n is a else 0.0) for n in (a, b, plain, stranger)}
        enters = {name: [e for e in evs if e.type == "ENTER"] for name, evs in seen.items()}
        assert enters == {"a": [], "b": [], "plain": [], "stranger": []}, seen
        assert seen["plain"] == [] and seen["stranger"] == []
        assert a.peers() == [b.uuid] and b.peers() == [a.uuid]
        assert plain.peers() == [] and stranger.peers() == []


def test_curve_options_are_checked() -> None:
    public, secret = curve_keypair()
    other_public, _ = curve_keypair()
    port = free_udp_port()
    with pytest.raises(ValueError, match="public key of curve_secretkey"):
        lo("x", port, curve_secretkey=secret, curve_publickey=other_public).start()
    with pytest.raises(ValueError, match="need curve_secretkey"):
        lo("x", port, allowed_keys=[public]).start()
    with pytest.raises(ValueError, match="allowed_keys"):
        lo("x", port, curve_secretkey=secret, allowed_keys=["not a key"]).start()
    with pytest.raises(ValueError, match="allowed_keys holds None"):
        lo("x", port, curve_secretkey=secret, allowed_keys=[public, None]).start()
    # Known endpoints and gossip carry no keys.
    with pytest.raises(ValueError, match="CURVE"):
        lo("x", port, curve_secretkey=secret, known_endpoints=["tcp://127.0.0.1:1"]).start()
    with pytest.raises(ValueError, match="CURVE"):
        lo("x", port, curve_secretkey=secret, beacons=False).start()
    # Raw 32-byte keys work as well as Z85.
    from dafka.zmtp import curve_public

    raw = bytes(range(32))
    with lo("raw", port, curve_secretkey=raw, allowed_keys=[curve_public(raw)]) as n:
        assert n.endpoint.startswith("tcp://127.0.0.1:")


def test_cli_curve_flags() -> None:
    port = free_udp_port()
    public, secret = curve_keypair()
    cli_public, cli_secret = curve_keypair()
    env = dict(os.environ, DAFKA_ZRE_CURVE_SECRET=cli_secret)
    cmd = [sys.executable, "-m", "dafka.cli", "zre", "G", "--name", "cli", "--interface", "lo"]
    # The `=` form: a Z85 key may start with '-' (1 in 85), which argparse would take for an
    # option in `--allow-key KEY`.
    cmd += ["--port", str(port), "--interval", "0.1", f"--allow-key={public}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline().split()
        assert first[0] == "UUID" and first[2] == "cli"
        with lo("py", port, curve_secretkey=secret, allowed_keys=[cli_public]) as node:
            enter = expect(node, lambda e: e.type == "ENTER")
            assert (enter.peer_uuid, enter.headers["X-PUBLICKEY"]) == (first[1], cli_public)
            line = proc.stdout.readline().split()
            assert line[:4] == ["ENTER", node.uuid, "py", node.endpoint]
            assert f"X-PUBLICKEY={public}" in line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=TIMEOUT)
    # --allow-key without a secret is a usage error.
    bad = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "DAFKA_ZRE_CURVE_SECRET"},
        timeout=TIMEOUT,
    )
    assert bad.returncode == 2 and "--curve-secret" in bad.stderr


def test_a_public_key_starting_with_0x00_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """zyre drops version-3 beacons whose key starts with 0x00 (docs/zre.md): a node with such
    a key warns at start; one with another key does not."""
    import zmq.utils.z85

    def pair(zero: bool) -> str:
        while True:  # 1 key pair in 256 starts with 0x00
            public, secret = curve_keypair()
            if (zmq.utils.z85.decode(public)[0] == 0) == zero:
                return secret

    caplog.set_level(logging.WARNING)
    port = free_udp_port()
    for zero in (False, True):
        caplog.clear()
        with lo("z", port, curve_secretkey=pair(zero)):
            pass
        warned = [r for r in caplog.records if "starts with 0x00" in r.getMessage()]
        assert len(warned) == int(zero), [r.getMessage() for r in caplog.records]
        if zero:
            assert "zyre" in warned[0].getMessage() and warned[0].levelno == logging.WARNING
