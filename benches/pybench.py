#!/usr/bin/env python3
"""One side of the Python-level PUSH/PULL benchmark: dafka.zmtp or pyzmq, driven
through its Python API as an application would (benches/run.py --python starts two).

The PULL side binds, receives `--warmup` messages, then times `--count` more
and prints one JSON line. The PUSH side connects, sends them all, and with
`--hold` keeps its socket open until its stdin closes (so nothing queued is
lost by closing early).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Any


def open_socket(impl: str, kind: str) -> Any:
    if impl == "dafka":
        import dafka.zmtp

        return dafka.zmtp.Socket(kind)
    import zmq

    return zmq.Context.instance().socket(getattr(zmq, kind))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["push", "pull"])
    ap.add_argument("--impl", choices=["dafka", "pyzmq"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--copy", choices=["true", "false"], default="true")
    ap.add_argument("--hold", action="store_true")
    args = ap.parse_args()
    copy = args.copy == "true"
    total = args.warmup + args.count
    out: dict[str, Any] = {"role": args.role, "impl": args.impl, "ok": False}
    try:
        if args.role == "push":
            s = open_socket(args.impl, "PUSH")
            s.connect(args.endpoint)
            body = b"x" * args.size
            send = s.send
            for _ in range(total):
                send(body, 0, copy)
            out["ok"] = True
            if args.hold:
                sys.stdin.read()
        else:
            s = open_socket(args.impl, "PULL")
            s.bind(args.endpoint)
            recv = s.recv
            for _ in range(args.warmup):
                recv(0, copy)
            started = time.perf_counter()
            cpu = time.process_time()
            n = 0
            for _ in range(args.count):
                n += len(recv(0, copy))
            elapsed = time.perf_counter() - started
            out.update(
                ok=n == args.count * args.size,
                msgs_per_s=args.count / elapsed,
                seconds=elapsed,
                cpu_s=time.process_time() - cpu,
            )
        out["rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        s.close(linger=0 if args.role == "pull" else None)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
