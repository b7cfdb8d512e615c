"""Unit tests of benches/dafka_e2e.py's pure parts: the report section and the target
verdicts (no benchmark is started)."""

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "dafka_e2e", Path(__file__).with_name("dafka_e2e.py")
)
e2e = importlib.util.module_from_spec(_spec)
sys.modules["dafka_e2e"] = e2e
_spec.loader.exec_module(e2e)


def case(kind: str, size: int, rate: float, ok: bool = True) -> dict:
    producer = {"ok": ok, "records": 1000, "records_per_s": rate, "mb_per_s": rate * size / 1e6}
    if kind == "rust":
        producer.update(ack_p50_us=1500.0, ack_p99_us=9000.0)
    if not ok:
        producer = {"ok": False, "error": "boom"}
    return {
        "producer_kind": kind,
        "size": size,
        "producer": producer | {"peak_rss_kib": 2048},
        "consumer": {"ok": True, "records_per_s": rate},
        "catchup": {"ok": True, "records_per_s": 2 * rate},
        "store": {"ok": True, "peak_rss_kib": 4096},
    }


def test_targets_judge_rust_and_python_against_the_issue():
    cases = [
        case("rust", 100, 1_200_000),
        case("py-send_many", 100, 600_000),
        case("py-send", 100, 400_000),
    ]
    rows = e2e.targets(cases)
    assert "| Rust, 100 B, durable: >= 1,000,000 records/s | met | 1,200,000 |" in rows
    assert "| Python `send_many`: >= 70% of Rust | not met | 50% |" in rows
    assert "| Python `send` loop: >= 500,000 records/s | not met | 400,000 |" in rows
    assert e2e.targets([])[2].split("|")[2].strip() == "—"


def test_render_is_one_section_with_its_markers_and_every_case():
    data = {
        "date": "d",
        "command": "c",
        "note": "n",
        "machine": {"cpu": "x", "cores": 2},
        "cases": [case("rust", 100, 1000.0), case("py-send", 1024, 10.0, ok=False)],
    }
    data["targets"] = e2e.targets(data["cases"])
    text = e2e.render(data)
    begin, end = e2e.run.SECTIONS["dafka"]
    assert text.startswith(begin) and text.endswith(end)
    row = "| Rust `send_many` (10 000 a call) | 100 B | 1,000 | 1,000 | 0.1 | 1.5 ms | 9.0 ms"
    assert row in text
    assert "failed: boom" in text
    spliced = e2e.run.splice_section("# B\n\nother\n", "dafka", text)
    assert spliced.count(begin) == 1 and "other" in spliced
    assert e2e.run.splice_section(spliced, "dafka", text) == spliced


def test_a_run_without_memory_keeps_the_previous_memory_subsection():
    mem = {
        "seconds": 600,
        "size": 100,
        "note": "run at then",
        "samples": [],
        "producer": {"records": 5, "records_per_s": 7.0},
        "consumer": {"records": 4, "skipped": 1},
    }
    data = {"cases": [case("rust", 100, 3000.0)], "memory": mem}
    data["targets"] = e2e.targets(data["cases"])
    first = e2e.run.splice_section("# B\n", "dafka", e2e.render(data))
    kept = e2e.kept_memory(first)
    assert kept.startswith("### Memory over time (600 s run, 100 B records, run at then)")
    assert kept.endswith("![RSS over time](docs/bench/dafka-memory.png)")
    # A short run: new cases, no memory in its data; the subsection survives unchanged.
    short = {"cases": [case("rust", 100, 5000.0)]}
    short["targets"] = e2e.targets(short["cases"])
    again = e2e.run.splice_section(first, "dafka", e2e.render(short, kept))
    assert "| 5,000 |" in again and "| 3,000 |" not in again
    assert e2e.kept_memory(again) == kept
    assert e2e.run.section(again, "dafka").count("### Memory over time") == 1
    # Nothing to keep: no subsection.
    assert e2e.kept_memory("# B\n") == ""
    assert "### Memory" not in e2e.render(short, e2e.kept_memory("# B\n"))


def test_one_process_rows_and_verdicts_set_it_beside_the_three_processes():
    c = case("py-send_many", 100, 1_000_000)
    c["one_process"] = {
        "ok": True,
        "producer": {"ok": True, "records_per_s": 900_000},
        "catchup": {"ok": True, "records_per_s": 1_000_000},
    }
    failed = case("py-send", 100, 500_000)
    failed["one_process"] = {"ok": False, "error": "timed out"}
    table = "\n".join(e2e.one_process_table([c, failed, case("rust", 100, 1.0)]))
    assert (
        "| Python `send_many` (pyarrow array of 10 000) | 100 B | 900,000 | 1,000,000 | 90% "
        "| 1,000,000 | 2,000,000 | 50% |"
    ) in table
    assert "failed: timed out" in table
    assert "Rust" not in table
    rows = e2e.targets([c])
    durable = "One process, Python `send_many` (pyarrow array of 10 000), 100 B, durable"
    assert f"| {durable}: >= 80% of three processes | met | 90% |" in rows
    assert (
        f"| {durable.replace('durable', 'catch-up')}: >= 80% of three processes | not met | 50% |"
        in rows
    )
    assert e2e.one_process_table([case("rust", 100, 1.0)]) == []


def test_keyed_rows_are_judged_against_their_value_only_rows():
    cases = [
        case("rust", 100, 1_000_000),
        case("rust-keyed", 100, 850_000),
        case("py-send_many", 100, 600_000),
        case("py-send_many-keyed", 100, 420_000),
    ]
    rows = e2e.targets(cases)
    rust = f"| {e2e.LABELS['rust-keyed']}, 100 B: >= 80% of the value-only records/s | met | 85% |"
    many = f"| {e2e.LABELS['py-send_many-keyed']}, 100 B: >= 80% of the value-only records/s"
    assert rust in rows
    assert f"{many} | not met | 70% |" in rows
    assert any(r.startswith(f"{many} | — |") for r in e2e.targets(cases[:3]))
