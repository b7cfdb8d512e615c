"""Extract the Dafka byte vectors the Rust tests use from the reference captures.

Reads ../shared/vectors/dafka/{scenario1,producer-fetch-bug}.json (captured from the
C reference nodes) and writes tests/data/dafka/{messages,subscriptions}.tsv: every
distinct message of scenario1 (beacons included), the non-record messages of the
FETCH-bug capture and a few of its DIRECT-RECORDs (right and wrong contents), and
every distinct subscription prefix. One line each, tab-separated:

    messages.tsv:       type, frames as hex (space-separated), decoded fields (k=v;...)
    subscriptions.tsv:  form, prefix as hex, wire bytes as hex

Usage: python3 scripts/extract_dafka_vectors.py /path/to/shared/vectors/dafka
"""

import json
import pathlib
import sys

FIELDS = (
    "topic_prefix",
    "address",
    "subject",
    "sequence",
    "count",
    "content_hex",
    "uuid",
    "host",
    "port_decimal_string",
    "endpoint",
)
BUG_SEQUENCES = {0, 255, 256, 299}


def decoded_fields(message: dict) -> str:
    decoded = message["decoded"]
    parts = [f"{k}={decoded[k]}" for k in FIELDS if k in decoded]
    if "subjects" in decoded:
        parts.append("subjects=" + ",".join(decoded["subjects"]))
    return ";".join(parts)


def main(source: pathlib.Path, out: pathlib.Path) -> None:
    seen: set[tuple[str, ...]] = set()
    lines = []
    for name in ("scenario1.json", "producer-fetch-bug.json"):
        capture = json.loads((source / name).read_text())
        for message in capture["messages"]:
            frames = tuple(message["frames_hex"])
            if frames in seen:
                continue
            if name != "scenario1.json" and message["type"] == "DIRECT-RECORD":
                if message["decoded"]["sequence"] not in BUG_SEQUENCES:
                    continue
            seen.add(frames)
            lines.append(f"{message['type']}\t{' '.join(frames)}\t{decoded_fields(message)}")
    (out / "messages.tsv").write_text("\n".join(lines) + "\n")

    capture = json.loads((source / "scenario1.json").read_text())
    subs = {}
    for sub in capture["subscriptions"]:
        subs.setdefault((sub["form"], sub["prefix_hex"]), sub["wire_hex"])
    sub_lines = [f"{form}\t{prefix}\t{wire}" for (form, prefix), wire in subs.items()]
    (out / "subscriptions.tsv").write_text("\n".join(sub_lines) + "\n")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), pathlib.Path(__file__).parent.parent / "tests/data/dafka")
