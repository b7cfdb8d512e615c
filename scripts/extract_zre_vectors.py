"""Extract the ZRE byte vectors the Rust tests use from the zyre 2.0.1 captures.

Reads ../shared/vectors/zre/{zre-beacon,zre-gossip}.json and writes tests/data/zre/:

    messages.tsv:  every ZRE message of both captures (zgossip left out), in capture order:
                   capture, t_ms, sending node, command, frames as hex (space-separated),
                   decoded fields (k=v;...; lists joined by ",", headers as key:value)
    beacons.tsv:   every beacon of zre-beacon.json: t_ms, sending node, source ip, payload hex,
                   uuid, port
    events.tsv:    the events the zyre API delivered on each side of zre-beacon.json:
                   node, event type, peer uuid, group ("-" for none)

Usage: python3 scripts/extract_zre_vectors.py /path/to/shared/vectors/zre
"""

import json
import pathlib
import sys

FIELDS = ("sequence", "endpoint", "status", "name_field", "group", "challenger_id", "leader_id")


def fields(decoded: dict) -> str:
    parts = [f"{k}={decoded[k]}" for k in FIELDS if k in decoded]
    if "groups" in decoded:
        parts.append("groups=" + ",".join(decoded["groups"]))
    if "headers" in decoded:
        parts.append("headers=" + ",".join(f"{k}:{v}" for k, v in decoded["headers"].items()))
    if "content_frames" in decoded:
        parts.append("content=" + ",".join(decoded["content_frames"]))
    return ";".join(parts)


def main(src: pathlib.Path, out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    messages = []
    for capture in ("zre-beacon", "zre-gossip"):
        d = json.loads((src / f"{capture}.json").read_text())
        for m in d["messages"]:
            if m["type"].startswith("zgossip"):
                continue
            node = m["from"].split(".")[0]
            frames = " ".join(m["frames_hex"])
            row = [capture, f"{m['t_ms']}", node, m["type"], frames, fields(m["decoded"])]
            messages.append("\t".join(row))
    (out / "messages.tsv").write_text("\n".join(messages) + "\n")

    d = json.loads((src / "zre-beacon.json").read_text())
    beacons = []
    for b in d["beacons"]:
        ip = b["udp"].split(":")[0]
        dec = b["decoded"]
        row = [f"{b['t_ms']}", b["from"], ip, b["payload_hex"], dec["uuid"], str(dec["port"])]
        beacons.append("\t".join(row))
    (out / "beacons.tsv").write_text("\n".join(beacons) + "\n")

    events = []
    for node, lines in d["app_events"].items():
        for line in lines:
            words = line.split()
            if len(words) < 5 or words[1] != "EVENT":
                continue
            kv = dict(w.split("=", 1) for w in words[3:] if "=" in w)
            events.append("\t".join([node, words[2], kv["peer"], kv["group"]]))
    (out / "events.tsv").write_text("\n".join(events) + "\n")


if __name__ == "__main__":
    root = pathlib.Path(__file__).resolve().parent.parent
    main(pathlib.Path(sys.argv[1]), root / "tests" / "data" / "zre")
