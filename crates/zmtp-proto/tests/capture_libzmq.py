#!/usr/bin/env python3
"""Capture what a real libzmq socket puts on the wire, to derive byte vectors for scripted.rs.

Talks to the system libzmq through ctypes (no pyzmq needed), on 127.0.0.1 only: a raw TCP
listener plays the peer, sends a NULL greeting (and optionally READY and more frames), and
prints everything the libzmq socket sends back plus whatever it delivered to the application.
Not run by CI; run by hand: `python3 crates/zmtp-proto/tests/capture_libzmq.py`.
"""
import ctypes
import socket
import time

z = ctypes.CDLL("libzmq.so.5")
z.zmq_ctx_new.restype = ctypes.c_void_p
z.zmq_socket.restype = ctypes.c_void_p
z.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
z.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
z.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
z.zmq_close.argtypes = [ctypes.c_void_p]
z.zmq_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

TYPES = dict(PAIR=0, PUB=1, SUB=2, REQ=3, REP=4, DEALER=5, ROUTER=6, PULL=7, PUSH=8, XPUB=9, XSUB=10)
ZMQ_ROUTING_ID, ZMQ_SUBSCRIBE, ZMQ_LINGER = 5, 6, 17
ZMQ_HEARTBEAT_IVL, ZMQ_HEARTBEAT_TTL, ZMQ_METADATA = 75, 76, 95
ZMQ_DONTWAIT = 1
GREETING = bytes.fromhex("ff00000000000000017f0301") + b"NULL".ljust(20, b"\0") + b"\0" * 32
CTX = z.zmq_ctx_new()


def setopt_int(s, opt, value):
    v = ctypes.c_int(value)
    z.zmq_setsockopt(s, opt, ctypes.byref(v), 4)


def frame(body, flags=0):
    return bytes([flags, len(body)]) + body


def ready(socket_type, identity=None):
    body = b"\x05READY\x0bSocket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    if identity is not None:
        body += b"\x08Identity" + len(identity).to_bytes(4, "big") + identity
    return bytes([4, len(body)]) + body


def capture(kind, identity=None, metadata=None, send=b"", heartbeat=False, wait=0.35):
    """Returns (bytes libzmq sent, messages libzmq delivered)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    s = z.zmq_socket(CTX, TYPES[kind])
    setopt_int(s, ZMQ_LINGER, 0)
    if identity is not None:
        z.zmq_setsockopt(s, ZMQ_ROUTING_ID, identity, len(identity))
    if metadata is not None:
        z.zmq_setsockopt(s, ZMQ_METADATA, metadata, len(metadata))
    if heartbeat:
        setopt_int(s, ZMQ_HEARTBEAT_IVL, 100)
        setopt_int(s, ZMQ_HEARTBEAT_TTL, 3000)
    if kind == "SUB":
        z.zmq_setsockopt(s, ZMQ_SUBSCRIBE, b"news", 4)
    z.zmq_connect(s, f"tcp://127.0.0.1:{srv.getsockname()[1]}".encode())
    conn, _ = srv.accept()
    conn.settimeout(0.05)
    # libzmq closes the connection if a message arrives before it has sent its own READY
    # (its NULL mechanism is "ready" only once READY went both ways), so give it time to
    # answer the greeting before sending READY and traffic -- as a real peer does.
    conn.sendall(GREETING)
    time.sleep(0.05)
    conn.sendall(send)
    sent = b""
    end = time.time() + wait
    while time.time() < end:
        try:
            chunk = conn.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        sent += chunk
    delivered = []
    buf = ctypes.create_string_buffer(256)
    while True:
        n = z.zmq_recv(s, buf, 256, ZMQ_DONTWAIT)
        if n < 0:
            break
        delivered.append(buf.raw[:n])
    z.zmq_close(s)
    conn.close()
    srv.close()
    return sent, delivered


def main():
    for kind, opts in [
        ("DEALER", {}),
        ("ROUTER", {}),
        ("SUB", {}),
        ("PUB", {}),
        ("REQ", dict(identity=b"peer1", metadata=b"X-App:demo")),
    ]:
        sent, _ = capture(kind, **opts)
        print(kind, "greeting", sent[:64].hex(" "))
        print(kind, "after greeting", sent[64:])
    print("SUB after our PUB READY", capture("SUB", send=ready(b"PUB"))[0][64:])
    print("ROUTER delivers", capture("ROUTER", send=ready(b"DEALER", b"") + frame(b"hello"))[1])
    print(
        "DEALER heartbeats",
        capture("DEALER", send=ready(b"ROUTER", b"") + b"\x04\x0a\x04PINGxxctx", heartbeat=True)[0][64:],
    )
    print("PUB given a PUB peer", capture("PUB", send=ready(b"PUB"))[0][64:])
    print(
        "DEALER given lower-case socket-type",
        capture("DEALER", send=b"\x04\x19\x05READY\x0bsocket-type\x00\x00\x00\x03REP")[0][64:],
    )


if __name__ == "__main__":
    main()
