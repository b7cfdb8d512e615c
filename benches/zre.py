"""ZRE benchmarks (`make bench-zre`): rewrites the ZRE section of BENCHMARKS.md.

1. Start to ENTER: node A runs; node B starts; the time until A reports B's ENTER (dafka.zre
   and pyre, each through its Python API, on loopback; median and max of --runs).
2. Nodes in one process: `zre_mesh N` (crates/zre/examples) for N in --mesh, with the open
   descriptors and resident memory at full mesh. A full mesh costs four descriptors per pair
   (two TCP connections, both ends in the process): 100 nodes need about 19 800, so the soft
   RLIMIT_NOFILE is raised first to what N needs (up to the hard limit; as root the hard limit
   too, never above /proc/sys/fs/nr_open), and the limit used is reported.
3. WHISPER and SHOUT throughput: node A sends --messages messages of --size bytes to B (one
   WHISPER each, or one SHOUT each to a group B joined), in windows of 500 that B acknowledges
   with a WHISPER (ZRE has no flow control: a message past the peer's send queue is dropped);
   the rate is counted at B from the first to the last message. dafka.zre against pyre, both
   through their Python APIs.

Everything on loopback (127.255.255.255, a free UDP port per run). pyre picks its beacon
interface itself, so it is confined to loopback as tests/test_zre_pyre.py does.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import free_udp_port, splice_section

REPO = Path(__file__).resolve().parent.parent
SECTION = "zre"
# Messages in flight before the sender waits for the receiver's ack (below every send queue).
WINDOW = 500


def confine_pyre_to_loopback() -> None:
    from pyre import zbeacon

    def prepare(self: Any) -> None:
        self.address = ipaddress.IPv4Address("127.0.0.1")
        self.network_address = ipaddress.IPv4Address("127.0.0.0")
        self.broadcast_address = ipaddress.IPv4Address("127.255.255.255")
        self.interface_name = "lo"

    zbeacon.ZBeacon._prepare_socket = prepare


# --- dafka.zre and pyre behind one small interface ------------------------------------


class DafkaSide:
    name = "dafka.zre"

    def __init__(self, label: str, port: int) -> None:
        from dafka.zre import Node

        # Over TCP as pyre, although both nodes are in this process (inproc otherwise).
        self.node = Node(label, interface="lo", port=port, local_inproc=False)

    def start(self) -> None:
        self.node.start()

    def uuid(self) -> str:
        return self.node.uuid

    def join(self, group: str) -> None:
        self.node.join(group)

    def whisper(self, peer: str, frame: bytes) -> None:
        self.node.whisper(peer, frame)

    def shout(self, group: str, frame: bytes) -> None:
        self.node.shout(group, frame)

    def next(self, timeout: float) -> tuple[str, str | None]:
        e = self.node.recv(timeout=timeout)
        return e.type, e.peer_uuid

    def stop(self) -> None:
        self.node.stop()


class PyreSide:
    name = "pyre 0.3.4"

    def __init__(self, label: str, port: int) -> None:
        import zmq
        from pyre import Pyre

        self.node = Pyre(label)
        self.node.set_port(str(port).encode())
        self.poller = zmq.Poller()
        self.poller.register(self.node.socket(), zmq.POLLIN)

    def start(self) -> None:
        self.node.start()

    def uuid(self) -> str:
        return str(self.node.uuid().hex.upper())

    def join(self, group: str) -> None:
        self.node.join(group)

    def whisper(self, peer: str, frame: bytes) -> None:
        self.node.whisper(uuid.UUID(peer), frame)

    def shout(self, group: str, frame: bytes) -> None:
        self.node.shout(group, frame)

    def next(self, timeout: float) -> tuple[str, str | None]:
        if not self.poller.poll(int(timeout * 1000)):
            raise TimeoutError
        # recv() is [type, peer uuid bytes, name, ...]; enough for counting.
        frames = self.node.recv()
        return frames[0].decode(), uuid.UUID(bytes=frames[1]).hex.upper()

    def stop(self) -> None:
        self.node.stop()


SIDES: dict[str, type[DafkaSide | PyreSide]] = {"dafka": DafkaSide, "pyre": PyreSide}


def wait_for(side: Any, kind: str, peer: str | None, timeout: float = 15.0) -> float:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            t, p = side.next(left)
        except TimeoutError:
            break
        if t == kind and (peer is None or p == peer):
            return time.perf_counter()
    raise RuntimeError(f"{side.name}: no {kind} from {peer} within {timeout} s")


def start_to_enter(impl: str, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        port = free_udp_port()
        a = SIDES[impl](f"a{i}", port)
        a.start()
        b = SIDES[impl](f"b{i}", port)
        t0 = time.perf_counter()
        b.start()
        t1 = wait_for(a, "ENTER", b.uuid())
        out.append(t1 - t0)
        b.stop()
        a.stop()
    return out


def throughput(impl: str, kind: str, messages: int, size: int) -> float:
    port = free_udp_port()
    a, b = SIDES[impl]("tx", port), SIDES[impl]("rx", port)
    a.start()
    b.start()
    try:
        wait_for(a, "ENTER", b.uuid())
        wait_for(b, "ENTER", a.uuid())
        if kind == "SHOUT":
            b.join("BENCH")
            wait_for(a, "JOIN", b.uuid())
        frame = b"x" * size
        peer, back = b.uuid(), a.uuid()
        first = last = 0.0
        got = 0

        def send() -> None:
            # Flow control, the same for both: a window of WINDOW messages, then wait for the
            # receiver's WHISPER "ack" (ZRE has none of its own: past a peer's send queue a
            # message is dropped, and the receiver drops the sender on the sequence gap).
            for i in range(messages):
                if kind == "WHISPER":
                    a.whisper(peer, frame)
                else:
                    a.shout("BENCH", frame)
                if (i + 1) % WINDOW == 0 and i + 1 < messages:
                    wait_for(a, "WHISPER", peer, timeout=30)

        import threading

        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 120
        while got < messages and time.monotonic() < deadline:
            try:
                t, _ = b.next(5.0)
            except TimeoutError:
                break
            if t == kind:
                got += 1
                last = time.perf_counter()
                if got == 1:
                    first = last
                if got % WINDOW == 0:
                    b.whisper(back, b"ack")
        sender.join()
        if got < messages:
            raise RuntimeError(f"{impl} {kind}: {got} of {messages} arrived")
        return (got - 1) / (last - first)
    finally:
        a.stop()
        b.stop()


def raise_nofile(want: int) -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft, hard
    if hard < want:
        try:
            nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
            new_hard = min(want, nr_open)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_hard, new_hard))
            return new_hard, new_hard
        except (OSError, ValueError):
            want = hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def mesh(binary: Path, n: int) -> dict[str, str]:
    # Four descriptors per pair, plus each node's beacon socket, mailbox and spare.
    limit = raise_nofile(2 * n * (n - 1) + 16 * n + 256)
    out = subprocess.run(
        [str(binary), str(n), str(free_udp_port())],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    fields["limit"] = str(limit[0])
    for key in ("first_enter",):
        fields[key] = fields.get(key, "?").removeprefix("Some(").removesuffix(")")
    return fields


def fmt_ms(s: float) -> str:
    return f"{s * 1000:.1f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--mesh", type=int, nargs="*", default=[20, 50, 100])
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3, help="throughput runs (median taken)")
    p.add_argument("--bin", type=Path, default=REPO / "target/release/examples/zre_mesh")
    p.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    args = p.parse_args()
    confine_pyre_to_loopback()
    load = os.getloadavg()[0]

    lines = []
    enter = {impl: start_to_enter(impl, args.runs) for impl in SIDES}
    for impl, xs in enter.items():
        print(f"start->ENTER {impl}: median {fmt_ms(statistics.median(xs))} max {fmt_ms(max(xs))}")
    rates = {}
    for kind in ("WHISPER", "SHOUT"):
        for impl in SIDES:
            runs = [throughput(impl, kind, args.messages, args.size) for _ in range(args.repeat)]
            rates[kind, impl] = statistics.median(runs)
            print(f"{kind} {impl}: {rates[kind, impl]:,.0f} msg/s")
    meshes = [mesh(args.bin, n) for n in args.mesh]
    for m in meshes:
        print("mesh", m)

    lines.append("<!-- zre-bench:begin (benches/zre.py) -->")
    lines.append("## ZRE (`make bench-zre`)")
    lines.append("")
    lines.append(
        f"Loopback, one run of `benches/zre.py` on the 2-core machine shared with other "
        f"builds (load average {load:.1f} at the start): figures are indicative."
    )
    lines.append("")
    lines.append(
        f"Start to ENTER ({args.runs} runs, node B started while A runs; the time until A "
        "reports B's ENTER; target: one beacon interval (1 s) + 50 ms):"
    )
    lines.append("")
    lines.append("| implementation | median | max |")
    lines.append("|---|---|---|")
    for impl, xs in enter.items():
        lines.append(
            f"| {SIDES[impl].name} | {fmt_ms(statistics.median(xs))} | {fmt_ms(max(xs))} |"
        )
    lines.append("")
    lines.append(
        f"WHISPER and SHOUT throughput, {args.messages} messages of {args.size} B from A to B, "
        f"both through their Python APIs, windows of {WINDOW} acknowledged by B, median of "
        f"{args.repeat} runs (target: 10x pyre):"
    )
    lines.append("")
    lines.append("| command | dafka.zre | pyre | dafka / pyre |")
    lines.append("|---|---|---|---|")
    for kind in ("WHISPER", "SHOUT"):
        d, py = rates[kind, "dafka"], rates[kind, "pyre"]
        lines.append(f"| {kind} | {d:,.0f} msg/s | {py:,.0f} msg/s | {d / py:.1f}x |")
    lines.append("")
    lines.append(
        "Nodes in one process (`zre_mesh N`: time from the first start until every node saw "
        "N-1 ENTERs; target: 100 nodes in under 5 s), RLIMIT_NOFILE raised by the bench:"
    )
    lines.append("")
    lines.append("| nodes | first ENTER | full mesh | complete nodes | open fds | RSS | fd limit |")
    lines.append("|---|---|---|---|---|---|---|")
    for m in meshes:
        lines.append(
            f"| {m['nodes']} | {m['first_enter']} | {m['full_mesh']} | {m['complete_nodes']} "
            f"| {m['fds']} | {m.get('rss', '?')} kB | {m['limit']} |"
        )
    lines.append("<!-- zre-bench:end -->")
    block = "\n".join(lines)
    text = args.out.read_text() if args.out.exists() else ""
    args.out.write_text(splice_section(text, SECTION, block))
    print(block)


if __name__ == "__main__":
    main()
