"""dafka.zmtp.Socket from Python: conversions, errors, blocking behaviour,
asyncio, fork safety, signals and logging."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ticks_while

import dafka
import dafka.zmtp
from dafka.zmtp import Socket


def test_every_socket_type_is_accepted_in_any_case() -> None:
    for name in dafka.zmtp.SOCKET_TYPES:
        with Socket(name.lower()) as s:
            assert s.socket_type == name
            assert name in repr(s)


def test_bad_arguments_raise_clear_errors() -> None:
    with pytest.raises(dafka.InvalidArgumentError, match="unknown socket type"):
        Socket("NOPE")
    with pytest.raises(ValueError, match="unknown socket option"):
        Socket("PUSH", snd_hwm=1)
    with pytest.raises(dafka.InvalidArgumentError, match="seconds"):
        Socket("PUSH", heartbeat_ivl=-1.0)
    with Socket("PUSH") as s:
        with pytest.raises(dafka.InvalidArgumentError):
            s.bind("udp://127.0.0.1:1")
        with pytest.raises(dafka.InvalidArgumentError):
            s.connect("tcp://no-port")
        with pytest.raises(TypeError, match="not str"):
            s.send("text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not str"):
            s.send([b"ok", "text"])  # type: ignore[list-item]
        with pytest.raises(dafka.InvalidArgumentError, match="at least one frame"):
            s.send([])
        with pytest.raises(dafka.StateError):
            s.subscribe(b"x")
        with pytest.raises(dafka.InvalidArgumentError):
            s.send(b"x", timeout=float("nan"))


def test_frames_round_trip_in_every_bytes_like_form(pair: tuple[Socket, Socket]) -> None:
    push, pull = pair
    push.send(b"single")
    push.send([b"a", bytearray(b"b"), memoryview(b"c"), b""])
    push.send(bytearray(b"ba"))
    push.send(memoryview(b"mv"))
    assert pull.recv_multipart(timeout=5) == [b"single"]
    assert pull.recv_multipart(timeout=5) == [b"a", b"b", b"c", b""]
    assert pull.recv_multipart(timeout=5) == [b"ba"]
    assert pull.recv_multipart(timeout=5) == [b"mv"]


def test_recv_timeout_loses_nothing(pair: tuple[Socket, Socket]) -> None:
    push, pull = pair
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        pull.recv_multipart(timeout=0.2)
    assert time.monotonic() - started >= 0.19
    push.send(b"late")
    assert pull.recv_multipart(timeout=5) == [b"late"]


def test_bind_resolves_port_and_wildcard() -> None:
    with Socket("PULL") as pull:
        endpoint = pull.bind("tcp://127.0.0.1:0")
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        with Socket("PULL") as other, pytest.raises(dafka.TransportError) as e:
            other.bind(endpoint)
        assert e.value.errno == errno.EADDRINUSE
        assert isinstance(e.value, OSError)
    with Socket("PULL") as pull, Socket("PUSH") as push:
        wild = pull.bind("tcp://*:0")
        port = int(wild.rsplit(":", 1)[1])
        assert port > 0
        push.connect(f"tcp://127.0.0.1:{port}")
        push.send(b"via wildcard")
        assert pull.recv_multipart(timeout=5) == [b"via wildcard"]


def test_ipc_and_inproc(tmp_path: Path) -> None:
    for endpoint in (f"ipc://{tmp_path}/s.sock", "inproc://bindings-test"):
        with Socket("PAIR", linger=0) as a, Socket("PAIR", linger=0) as b:
            b.connect(a.bind(endpoint))
            a.send([b"x", b"y"])
            assert b.recv_multipart(timeout=5) == [b"x", b"y"]
            b.send(b"back")
            assert a.recv_multipart(timeout=5) == [b"back"]


def test_req_lock_step_is_enforced() -> None:
    with Socket("REP") as rep, Socket("REQ") as req:
        req.connect(rep.bind("tcp://127.0.0.1:0"))
        req.send(b"q")
        with pytest.raises(dafka.StateError):
            req.send(b"again")
        assert rep.recv_multipart(timeout=5) == [b"q"]
        rep.send(b"r")
        assert req.recv_multipart(timeout=5) == [b"r"]


def test_closed_socket_refuses_work() -> None:
    s = Socket("PUSH")
    with s:
        pass
    with pytest.raises(dafka.ClosedError):
        s.send(b"x")
    s.close()  # idempotent


def test_blocking_calls_release_the_gil(pair: tuple[Socket, Socket]) -> None:
    _, pull = pair

    def recv() -> None:
        with pytest.raises(TimeoutError):
            pull.recv_multipart(timeout=0.5)

    ticks = ticks_while(recv)
    assert ticks > 50, f"the other thread ran only {ticks} times while recv blocked"


def test_asyncio_send_and_recv(pair: tuple[Socket, Socket]) -> None:
    push, pull = pair

    async def main() -> list[list[bytes]]:
        for i in range(10):
            await push.send_async([b"n", str(i).encode()])
        return [await pull.recv_async() for _ in range(10)]

    got = asyncio.run(main())
    assert got == [[b"n", str(i).encode()] for i in range(10)]


def test_cancelled_recv_async_loses_no_message(pair: tuple[Socket, Socket]) -> None:
    push, pull = pair
    n = 300

    async def main() -> list[bytes]:
        received: list[bytes] = []
        for i in range(n):
            task = asyncio.ensure_future(pull.recv_async())
            push.send(str(i).encode())
            await asyncio.sleep(0)
            task.cancel()
            try:
                received.append((await task)[0])
            except asyncio.CancelledError:
                pass
        while len(received) < n:
            received.append((await asyncio.wait_for(pull.recv_async(), 5))[0])
        return received

    got = asyncio.run(main())
    assert [int(x) for x in got] == list(range(n)), "lost or reordered"


def test_concurrent_recv_async_keep_arrival_order(pair: tuple[Socket, Socket]) -> None:
    push, pull = pair
    n = 200

    async def main() -> list[int]:
        waiters = [asyncio.ensure_future(pull.recv_async()) for _ in range(n)]
        await asyncio.sleep(0)
        for i in range(n):
            push.send(str(i).encode())
        # Cancel every third waiter; its message must reach a later receive.
        for w in waiters[::3]:
            w.cancel()
        got = []
        for w in waiters:
            try:
                got.append(int((await w)[0]))
            except asyncio.CancelledError:
                pass
        while len(got) < n:
            got.append(int((await asyncio.wait_for(pull.recv_async(), 5))[0]))
        return got

    got = asyncio.run(main())
    assert sorted(got) == list(range(n)), "a message was lost"
    assert got == sorted(got), "messages came out of arrival order"


def test_sockets_work_in_a_forked_child() -> None:
    """PySpark forks its workers after the parent used dafka: the child must
    get a working runtime of its own."""
    with Socket("PULL", linger=0) as pull, Socket("PUSH", linger=0) as push:
        push.connect(pull.bind("tcp://127.0.0.1:0"))
        push.send(b"parent")
        assert pull.recv_multipart(timeout=5) == [b"parent"]
        pid = os.fork()
        if pid == 0:  # child: exit code tells the parent what happened
            code = 1
            try:
                with Socket("PULL", linger=0) as p2, Socket("PUSH", linger=0) as s2:
                    s2.connect(p2.bind("tcp://127.0.0.1:0"))
                    s2.send(b"child")
                    code = 0 if p2.recv_multipart(timeout=5) == [b"child"] else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        push.send(b"parent again")  # and the parent's runtime is untouched
        assert pull.recv_multipart(timeout=5) == [b"parent again"]


def test_a_socket_inherited_across_fork_refuses_to_work() -> None:
    """The parent's socket lives on the parent's runtime threads, which do not
    exist in the child: using it there fails at once instead of hanging."""
    with Socket("PUSH", linger=0) as inherited:
        inherited.bind("tcp://127.0.0.1:0")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    inherited.send(b"x", timeout=5)
                except dafka.StateError as e:
                    code = 0 if "fork" in str(e) else 2
                inherited.close()  # a no-op in the child, never a hang
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_ctrl_c_interrupts_a_blocking_recv(tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from dafka.zmtp import Socket
            s = Socket("PULL", linger=0)
            s.bind("tcp://127.0.0.1:0")
            print("ready", flush=True)
            try:
                s.recv_multipart()
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(3)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 3
    assert proc.stdout.read().strip() == "interrupted"


def test_rust_logs_reach_python_logging(caplog: pytest.LogCaptureFixture) -> None:
    """A hostile peer is closed with a logged reason, and the log record
    arrives in Python's logging under the crate's name."""
    caplog.set_level(logging.DEBUG)
    with Socket("PULL", linger=0) as pull, Socket("PUSH", linger=0) as push:
        endpoint = pull.bind("tcp://127.0.0.1:0")
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(64))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not any(
                r.name.startswith("dafka_zmtp") and r.levelno >= logging.WARNING
                for r in caplog.records
            ):
                time.sleep(0.05)
        # The socket still serves well-behaved peers.
        push.connect(endpoint)
        push.send(b"fine")
        assert pull.recv_multipart(timeout=5) == [b"fine"]
    warnings = [r for r in caplog.records if r.name.startswith("dafka_zmtp")]
    assert any(r.levelno >= logging.WARNING for r in warnings), [
        (r.name, r.getMessage()) for r in caplog.records
    ]


def test_unbind_and_disconnect() -> None:
    with Socket("PULL", linger=0) as pull, Socket("PUSH", linger=0) as push:
        endpoint = pull.bind("tcp://127.0.0.1:0")
        push.connect(endpoint)
        push.send(b"one")
        assert pull.recv_multipart(timeout=5) == [b"one"]
        push.disconnect(endpoint)
        with pytest.raises(dafka.InvalidArgumentError):
            push.disconnect(endpoint)
        pull.unbind(endpoint)
        with pytest.raises(dafka.InvalidArgumentError):
            pull.unbind(endpoint)


def test_xpub_welcome_message_and_invalid_option_values() -> None:
    with Socket("XPUB", linger=0, xpub_welcome_msg=b"W") as xpub, Socket("SUB", linger=0) as sub:
        sub.subscribe(b"")
        sub.connect(xpub.bind("tcp://127.0.0.1:0"))
        assert sub.recv_multipart(timeout=5) == [b"W"]
    # Refused when the socket is created, not at the first bind.
    with pytest.raises(dafka.InvalidArgumentError):
        Socket("DEALER", routing_id=b"x" * 256)


def test_maxmsgsize_bounds_each_frame_as_in_libzmq() -> None:
    with Socket("PULL", linger=0, maxmsgsize=1000) as pull, Socket("PUSH", linger=0) as push:
        push.connect(pull.bind("tcp://127.0.0.1:0"))
        # A frame of exactly the limit, alone or in a multipart message, is accepted.
        push.send(b"a" * 1000)
        assert pull.recv_multipart(timeout=5) == [b"a" * 1000]
        push.send([b"b" * 1000, b"c" * 1000])
        assert pull.recv_multipart(timeout=5) == [b"b" * 1000, b"c" * 1000]
        # One byte more: the peer loses its connection and the frame is never delivered.
        push.send(b"d" * 1001)
        with pytest.raises(dafka.TimeoutError):
            pull.recv_multipart(timeout=0.5)
        # The limit applies to what this socket sends too, with a clear error.
        with Socket("PUSH", linger=0, maxmsgsize=1000) as limited:
            with pytest.raises(dafka.DafkaError):
                limited.send(b"e" * 1001)


def test_sndhwm_and_rcvhwm_bound_what_is_queued(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/hwm"
    with Socket("PUSH", linger=0, sndhwm=5) as push:
        # No peer yet: the connecting side queues up to its sndhwm, then blocks.
        push.connect(endpoint)
        for i in range(5):
            push.send(b"%d" % i, timeout=1)
        with pytest.raises(dafka.TimeoutError):
            push.send(b"over", timeout=0.2)
        with Socket("PULL", linger=0) as pull:
            pull.bind(endpoint)
            assert [pull.recv(timeout=5) for _ in range(5)] == [b"%d" % i for i in range(5)]
            with pytest.raises(dafka.TimeoutError):
                pull.recv_multipart(timeout=0.2)
    # inproc holds at most both HWMs between the two sockets; sending the rest
    # waits for the receiver.
    with Socket("PULL", linger=0, rcvhwm=3) as pull, Socket("PUSH", linger=0, sndhwm=2) as push:
        pull.bind("inproc://hwm-test")
        push.connect("inproc://hwm-test")
        sent = 0
        with pytest.raises(dafka.TimeoutError):
            while sent < 100:
                push.send(b"%d" % sent, timeout=0.3)
                sent += 1
        assert 5 <= sent <= 7, sent
        assert [pull.recv(timeout=5) for _ in range(sent)] == [b"%d" % i for i in range(sent)]
