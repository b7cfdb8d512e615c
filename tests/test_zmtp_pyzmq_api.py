"""The pyzmq-shaped API of dafka.zmtp.Socket: one-frame send/recv with flags,
multipart, zero-copy frames, socket options by libzmq number, Poller, and a
close that returns at once while queued messages flush in the background."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest
import zmq
from ports import free_tcp_port

import dafka
import dafka.zmtp as z
from dafka.zmtp import Frame, Monitor, Poller, Socket


def test_close_returns_at_once_with_a_message_queued_for_an_unreachable_peer() -> None:
    push = Socket("PUSH")  # default linger: until sent
    push.connect("tcp://127.0.0.1:1")  # nobody listens on port 1
    push.send(b"never delivered")
    started = time.monotonic()
    push.close()
    assert time.monotonic() - started < 0.1
    assert push.closed
    with Socket("PUSH") as other:  # leaving `with` closes the same way
        other.connect("tcp://127.0.0.1:1")
        other.send(b"queued")
        started = time.monotonic()
    assert time.monotonic() - started < 0.1
    # term() waits for both, bounded, and says it cut them short.
    started = time.monotonic()
    assert z.term(0.2) == 2
    assert 0.15 < time.monotonic() - started < 2.0
    assert z.term() == 0  # nothing left to wait for: returns at once


def test_closed_socket_keeps_flushing_in_the_background() -> None:
    port = free_tcp_port()
    push = Socket("PUSH", reconnect_ivl=0.02)
    push.connect(f"tcp://127.0.0.1:{port}")
    push.send_multipart([b"sent", b"before the peer existed"])
    push.close()  # returns at once; the message stays queued
    with Socket("PULL", linger=0) as pull:
        pull.bind(f"tcp://127.0.0.1:{port}")
        assert pull.recv_multipart(timeout=5) == [b"sent", b"before the peer existed"]
    assert z.term(5.0) == 0


def test_close_linger_bounds_the_background_flush() -> None:
    push = Socket("PUSH")
    push.connect("tcp://127.0.0.1:1")
    push.send(b"dropped after the linger")
    push.close(linger=50)  # milliseconds, as pyzmq
    started = time.monotonic()
    assert z.term(5.0) == 0  # the linger ended the flush, not term's timeout
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"routing_id": b"\x00bad"}, "routing_id"),
        ({"maxmsgsize": -1}, "maxmsgsize"),
        ({"sndhwm": -1}, "sndhwm"),
        ({"rcvhwm": 2**80}, "rcvhwm"),
        ({"linger": "forever"}, "linger"),
        ({"heartbeat_ivl": float("inf")}, "heartbeat_ivl"),
        ({"routing_id": "text"}, "routing_id"),
        ({"properties": {"X-A": 1}}, "properties"),
    ],
)
def test_bad_options_raise_at_construction_naming_the_option(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(dafka.InvalidArgumentError, match=named):
        Socket("DEALER", **options)  # type: ignore[arg-type]


def test_bad_setsockopt_values_raise_naming_the_option() -> None:
    with Socket("DEALER") as s:
        with pytest.raises(dafka.InvalidArgumentError, match="routing_id"):
            s.setsockopt(z.ROUTING_ID, b"\x00bad")
        with pytest.raises(dafka.InvalidArgumentError, match="maxmsgsize"):
            s.setsockopt(z.MAXMSGSIZE, -1)
        with pytest.raises(dafka.InvalidArgumentError, match="sndhwm"):
            s.setsockopt(z.SNDHWM, -5)
        with pytest.raises(dafka.InvalidArgumentError, match="unknown"):
            s.setsockopt(9999, 1)
        with pytest.raises(dafka.InvalidArgumentError, match="read-only"):
            s.setsockopt(z.TYPE, 1)
        assert s.getsockopt(z.SNDHWM) == 1000  # the refused values left nothing behind


def test_recv_returns_bytes_one_frame_at_a_time(pair: tuple[Socket, Socket]) -> None:
    push, pull = pair
    push.send(b"one frame")
    got = pull.recv(timeout=5)
    assert type(got) is bytes and got == b"one frame"
    assert pull.getsockopt(z.RCVMORE) == 0
    push.send(b"a", z.SNDMORE)
    push.send(b"b", flags=z.SNDMORE)
    push.send(b"c")
    assert pull.recv(timeout=5) == b"a"
    assert pull.getsockopt(z.RCVMORE) == 1
    assert pull.recv_multipart() == [b"b", b"c"]  # the rest of the same message
    assert pull.getsockopt(z.RCVMORE) == 0
    push.send_multipart([b"x", bytearray(b"y"), memoryview(b"z")])
    assert pull.recv_multipart(timeout=5) == [b"x", b"y", b"z"]


def test_noblock_raises_would_block() -> None:
    with Socket("PULL", linger=0) as pull:
        pull.bind("tcp://127.0.0.1:0")
        with pytest.raises(dafka.WouldBlockError):
            pull.recv(z.NOBLOCK)
        with pytest.raises(BlockingIOError):  # WouldBlockError is one
            pull.recv_multipart(z.DONTWAIT)
    with Socket("PUSH", sndhwm=1, linger=0) as push:
        push.connect("tcp://127.0.0.1:1")
        push.send(b"fills the queue", z.NOBLOCK)
        started = time.monotonic()
        with pytest.raises(dafka.WouldBlockError):
            push.send(b"over the high-water mark", z.NOBLOCK)
        with pytest.raises(dafka.WouldBlockError):
            push.send_multipart([b"over", b"it"], z.NOBLOCK)
        assert time.monotonic() - started < 0.5


def test_copy_false_gives_zero_copy_frames(pair: tuple[Socket, Socket]) -> None:
    push, pull = pair
    big = bytes(range(256)) * 1024  # 256 KiB
    push.send_multipart([b"small", big])
    small, large = pull.recv_multipart(copy=False, timeout=5)
    assert isinstance(small, Frame) and isinstance(large, Frame)
    assert small == b"small" and len(large) == len(big)
    assert hash(small) == hash(b"small") and {b"small": 1}[small] == 1
    view = memoryview(large)
    assert view.readonly and view.nbytes == len(big) and view.format == "B"
    assert view[:3].tobytes() == big[:3]
    assert bytes(large) == big and large.bytes == big
    assert large.buffer.tobytes() == big
    # The view keeps the frame's memory alive after the frame is gone.
    del large
    assert view[-1] == big[-1]
    view.release()
    with pytest.raises(TypeError, match="read-only"):
        memoryview(small)[0:1] = b"x"
    # A received frame can be sent on, again without a copy.
    push.send(Frame(b"wrapped"))
    frame = pull.recv(copy=False, timeout=5)
    assert isinstance(frame, Frame)
    push.send(frame)
    assert pull.recv(timeout=5) == b"wrapped"


def test_large_bytes_are_sent_by_reference_not_copied() -> None:
    big = b"x" * 200_000
    before = sys.getrefcount(big)
    with Socket("PUSH", linger=0) as push:
        push.connect("tcp://127.0.0.1:1")  # stays queued
        push.send(big)
        # The queue holds the bytes object itself (a copy would not count).
        assert sys.getrefcount(big) == before + 1
        small = b"y" * 100
        before_small = sys.getrefcount(small)
        push.send(small)
        assert sys.getrefcount(small) == before_small  # small frames are copied
    assert z.term(2.0) == 0


def test_options_by_libzmq_number_and_in_milliseconds() -> None:
    names = [n for n in z.__all__ if n.isupper() and n != "SOCKET_TYPES"]
    for name in names:
        assert getattr(z, name) == getattr(zmq, name), name
    with Socket("PULL") as s:
        assert s.getsockopt(z.TYPE) == zmq.PULL
        assert s.getsockopt(z.LINGER) == -1
        s.setsockopt(z.LINGER, 250)
        s.setsockopt(z.RCVHWM, 7)
        s.setsockopt(z.HEARTBEAT_IVL, 1500)
        assert s.getsockopt(z.LINGER) == 250
        assert s.getsockopt(z.RCVHWM) == 7
        assert s.getsockopt(z.HEARTBEAT_IVL) == 1500
        endpoint = s.bind("tcp://127.0.0.1:0")
        assert s.getsockopt(z.LAST_ENDPOINT) == endpoint.encode()
        with pytest.raises(dafka.StateError, match="rcvhwm"):
            s.setsockopt(z.RCVHWM, 8)  # fixed once the socket started
        s.setsockopt(z.LINGER, 0)  # linger may change until close
        assert s.getsockopt(z.LINGER) == 0
        s.setsockopt(z.RCVTIMEO, 100)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            s.recv()
        assert 0.09 < time.monotonic() - started < 2.0
        assert s.getsockopt(z.RCVTIMEO) == 100


def test_subscribe_takes_str_or_bytes() -> None:
    with Socket("PUB", linger=0) as pub, Socket("SUB", linger=0) as sub:
        sub.connect(pub.bind("tcp://127.0.0.1:0"))
        sub.subscribe("wea")
        sub.setsockopt(z.SUBSCRIBE, b"spo")
        deadline = time.monotonic() + 5
        got: list[bytes] = []
        while not got and time.monotonic() < deadline:
            pub.send(b"weather")
            pub.send(b"news")
            try:
                got.append(sub.recv(timeout=0.05))
            except TimeoutError:
                pass
        assert got == [b"weather"]
        pub.send(b"sports")
        pub.send(b"news")
        pub.send(b"weather")
        assert [sub.recv(timeout=5), sub.recv(timeout=5)] == [b"sports", b"weather"]


def test_poller_waits_on_several_sockets() -> None:
    with (
        Socket("PULL", linger=0) as a,
        Socket("PULL", linger=0) as b,
        Socket("PUSH", linger=0) as to_a,
        Socket("PUSH", linger=0) as to_b,
    ):
        to_a.connect(a.bind("tcp://127.0.0.1:0"))
        to_b.connect(b.bind("tcp://127.0.0.1:0"))
        poller = Poller()
        poller.register(a, z.POLLIN)
        poller.register(b, z.POLLIN)
        started = time.monotonic()
        assert poller.poll(100) == []
        assert 0.09 < time.monotonic() - started < 2.0
        to_b.send(b"b1")
        to_b.send(b"b2")
        assert poller.poll(5000) == [(b, z.POLLIN)]
        assert b.recv() == b"b1"  # readiness took nothing away, in order
        to_a.send(b"a1")
        # b2 and a1 travel on two connections: either may arrive first, so poll until
        # both have been seen (a stashed message keeps its socket ready).
        ready = dict(poller.poll(5000))
        deadline = time.monotonic() + 5
        while (a not in ready or b not in ready) and time.monotonic() < deadline:
            ready.update(poller.poll(5000))
        assert ready[b] == z.POLLIN
        assert ready[a] == z.POLLIN
        assert (a.recv(), b.recv()) == (b"a1", b"b2")
        assert poller.poll(0) == []
        poller.register(to_a)  # pyzmq's default: POLLIN | POLLOUT
        assert poller.poll(0) == [(to_a, z.POLLOUT)]
        poller.unregister(to_a)
        with pytest.raises(dafka.InvalidArgumentError):
            poller.unregister(to_a)


def test_poller_poll_async_never_blocks_the_loop_and_cancelling_loses_nothing() -> None:
    async def main() -> None:
        with Socket("PULL", linger=0) as a, Socket("PUSH", linger=0) as to_a:
            to_a.connect(a.bind("tcp://127.0.0.1:0"))
            poller = Poller()
            poller.register(a, z.POLLIN)
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.005)

            ticker = asyncio.create_task(tick())
            started = time.monotonic()
            assert await poller.poll_async(200) == []
            assert 0.19 < time.monotonic() - started < 2.0
            assert ticks >= 10  # the loop kept running while the poll waited
            # A cancelled poll_async loses no message: the one that arrives after
            # the cancellation is still received, in order.
            waiting = asyncio.create_task(poller.poll_async())
            await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            to_a.send(b"m1")
            to_a.send(b"m2")
            assert await poller.poll_async(5000) == [(a, z.POLLIN)]
            assert a.recv() == b"m1"
            assert a.recv(timeout=5) == b"m2"
            # A message arriving while poll_async waits wakes it.
            later = asyncio.get_running_loop().call_later(0.1, to_a.send, b"m3")
            assert await poller.poll_async(5000) == [(a, z.POLLIN)]
            later.cancel()
            assert a.recv() == b"m3"
            ticker.cancel()

    asyncio.run(main())


def test_pyzmq_copy_false_frames_interoperate() -> None:
    ctx = zmq.Context.instance()
    theirs = ctx.socket(zmq.PUSH)
    theirs.linger = 0
    big = bytes(300_000)
    try:
        with Socket("PULL", linger=0) as ours, Socket("PUSH", linger=0) as back:
            theirs.connect(ours.bind("tcp://127.0.0.1:0"))
            theirs.send_multipart([b"head", big], copy=False)
            head, body = ours.recv_multipart(copy=False, timeout=5)
            assert head == b"head" and bytes(body) == big
            pull = ctx.socket(zmq.PULL)
            pull.linger = 0
            port = pull.bind_to_random_port("tcp://127.0.0.1")
            back.connect(f"tcp://127.0.0.1:{port}")
            back.send(body, copy=False)  # our zero-copy frame, sent on to libzmq
            assert pull.poll(5000)
            assert pull.recv() == big
            pull.close()
    finally:
        theirs.close()


def _events_until(monitor: Monitor, name: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Events up to and including the first called `name`."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = monitor.recv(timeout=deadline - time.monotonic())
        assert event is not None, f"stream ended before {name}: {seen}"
        seen.append(event)
        if event["event"] == name:
            return seen
    raise AssertionError(f"no {name} event: {seen}")


def test_monitor_reports_handshakes_with_metadata_and_disconnections() -> None:
    router = Socket("ROUTER", linger=0)
    events = router.monitor()
    endpoint = router.bind("tcp://127.0.0.1:0")
    assert _events_until(events, "listening")[-1]["endpoint"] == endpoint
    dealer = Socket("DEALER", linger=0, routing_id=b"mailbox-7", properties={"X-Name": b"n7"})
    dealer.connect(endpoint)
    seen = _events_until(events, "handshake_succeeded")
    accepted = next(e for e in seen if e["event"] == "accepted")
    done = seen[-1]
    assert done["peer"] == accepted["peer"]
    assert done["socket_type"] == "DEALER"
    assert done["identity"] == b"mailbox-7" and done["routing_id"] == b"mailbox-7"
    assert done["metadata"]["X-Name"] == b"n7"
    dealer.close()
    gone = _events_until(events, "disconnected")[-1]
    assert gone["peer"] == done["peer"] and gone["reason_kind"] in ("peer_closed", "io")
    with pytest.raises(dafka.WouldBlockError):
        events.recv(z.NOBLOCK)
    router.close()
    assert _events_until(events, "closed")[-1] == {"event": "closed"}
    assert events.recv(timeout=5) is None  # the stream ended


def test_monitor_reports_connect_retries_and_subscriptions() -> None:
    push = Socket("PUSH", linger=0, reconnect_ivl=0.02)
    events = push.monitor(8)
    push.connect("tcp://127.0.0.1:1")
    retried = _events_until(events, "connect_retried")[-1]
    assert retried["endpoint"] == "tcp://127.0.0.1:1" and retried["delay"] >= 0
    push.close()
    with Socket("PUB", linger=0) as pub, Socket("SUB", linger=0) as sub:
        pub_events = pub.monitor()
        sub.connect(pub.bind("tcp://127.0.0.1:0"))
        sub.subscribe("topic")
        subscribed = _events_until(pub_events, "subscribed")[-1]
        assert subscribed["prefix"] == b"topic" and isinstance(subscribed["peer"], int)
