"""A Dafka store, producer or consumer in its own process, finding the others through ZRE
(``towers="zre://CLUSTER?interface=IF"``), for tests/test_zre_netns.py.

    python dafka_zre_proc.py store TOWERS DIR        prints READY, runs until a line on stdin
    python dafka_zre_proc.py produce TOWERS TOPIC N  sends N records, flushes, prints FLUSHED
    python dafka_zre_proc.py consume TOWERS TOPIC N  prints GOT <n> <first> <last> at N records
"""

from __future__ import annotations

import sys
import time

import dafka


def main() -> None:
    role, towers, arg = sys.argv[1:4]
    if role == "store":
        with dafka.Store(arg, towers=towers, sync="never"):
            print("READY", flush=True)
            sys.stdin.readline()
        return
    topic, n = arg, int(sys.argv[4])
    if role == "produce":
        with dafka.Producer(topic, towers=towers) as producer:
            producer.send_many([f"v{i}".encode() for i in range(n)])
            producer.flush(timeout=60)
            print("FLUSHED", flush=True)
        return
    with dafka.Consumer(topic, towers=towers, offset_reset="earliest") as consumer:
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout=0.5).column("value").to_pylist())
        print("GOT", len(got), got[0].decode(), got[-1].decode(), flush=True)


if __name__ == "__main__":
    main()
