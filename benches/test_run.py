"""Unit tests of benches/run.py's pure parts: filters, calibration and target verdicts.

Run with `python3 -m pytest benches/test_run.py` (no benchmark is started).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("bench_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
sys.modules["bench_run"] = run
_spec.loader.exec_module(run)

Case, Pair = run.Case, run.Pair


def test_only_tokens_are_classified_by_kind():
    backends, tests, sizes = run.parse_only(["dafka,libzmq", "latency", "16,256k,1KiB"])
    assert backends == {"dafka", "libzmq"}
    assert tests == {"reqrep"}
    assert sizes == {16, 262144, 1024}
    with pytest.raises(SystemExit):
        run.parse_only(["omq"])
    with pytest.raises(SystemExit):
        run.parse_only(["17"])


def test_counts_follow_the_calibrated_rate_within_bounds():
    fast = Pair(True, measured={"msgs_per_s": 2e6})
    assert run.count_for("pushpull", fast, 1.5) == 3_000_000
    assert run.count_for("pushpull", Pair(True, measured={"msgs_per_s": 10}), 1.5) == 1000
    assert run.count_for("pushpull", Pair(True, measured={"msgs_per_s": 1e12}), 1.5) == 50_000_000
    assert run.count_for("reqrep", Pair(True, measured={"p50_us": 10.0}), 1.0) == 100_000
    assert run.count_for("reqrep", Pair(True, measured={"p50_us": 500.0}), 1.0) == 20_000
    assert run.warmup_for(100_000) == 5000
    assert run.warmup_for(10) == 100


def summary_of(rates: dict, p50: dict) -> dict:
    s = {}
    for (b, size), r in rates.items():
        s[Case(b, "pushpull", size)] = {"msgs_per_s": r, "mb_per_s": r * size / 1e6}
    for b, v in p50.items():
        s[Case(b, "reqrep", run.LATENCY_SIZE)] = {"p50_us": v}
    return s


def test_targets_are_not_judged_without_our_backend():
    s = summary_of({("libzmq", 16): 1e6, ("raw", 16): 5e6}, {"libzmq": 20.0})
    rows = run.evaluate_targets(s, ["libzmq", "raw"], [16], True)
    assert len(rows) == 4
    assert all(verdict == "—" for _, verdict, _ in rows)


def test_targets_met_and_missed():
    sizes = [16, 262144]
    rates = {
        ("dafka", 16): 3e6,
        ("libzmq", 16): 1e6,
        ("zmqrs", 16): 0.5e6,
        ("raw", 16): 9e6,
        ("dafka", 262144): 6e3,
        ("libzmq", 262144): 5e3,
        ("zmqrs", 262144): 5.5e3,
        ("raw", 262144): 1e4,
    }
    s = summary_of(rates, {"dafka": 9.0, "libzmq": 20.0, "zmqrs": 8.0})
    rows = {
        name: (v, d)
        for name, v, d in run.evaluate_targets(s, ["dafka", "libzmq", "zmqrs", "raw"], sizes, True)
    }
    verdicts = [v for v, _ in rows.values()]
    # ahead everywhere, 3x libzmq at 16 B, 60% of raw at 256 KiB, 9 us vs zmq.rs 8 us
    assert verdicts == ["met", "met", "NOT met", "NOT met"]
    assert any("60% of raw" in d for _, d in rows.values())
    assert any("zmq.rs 8.0" in d for _, d in rows.values())


def test_summary_takes_the_median_and_ignores_failed_runs():
    case = Case("raw", "pushpull", 16)
    pairs = [
        Pair(
            True,
            {
                "msgs_per_s": v,
                "mb_per_s": v * 16 / 1e6,
                "peak_rss_kib": 1,
                "cpu_s": v,
                "count": 900,
                "warmup": 100,
            },
            {"cpu_s": 1.0},
        )
        for v in (1.0, 5.0, 3.0)
    ]
    pairs.append(Pair(False, error="push: timed out"))
    s = run.summarize({case: pairs})[case]
    assert s["msgs_per_s"] == 3.0
    assert s["ok_runs"] == 3 and s["errors"] == ["push: timed out"]
    assert s["spread"] == pytest.approx(2 / 3)
    # (3 + 1) CPU seconds over 1000 messages, the median of 2, 4 and 6 ms per message
    assert s["cpu_ns_per_msg"] == pytest.approx(4e6)


def test_owned_sections_are_kept_and_replaced():
    begin, end = run.SECTIONS["storage"]
    old = begin + "\n## Storage\nold\n" + end
    text = "# Benchmarks\n\nbody\n\n" + old + "\n"
    assert run.section(text, "storage") == old
    assert run.section("# Benchmarks\n", "storage") == ""
    new = begin + "\nnew\n" + end
    assert run.splice_section(text, "storage", new) == "# Benchmarks\n\nbody\n\n" + new + "\n"
    assert run.splice_section("# B\n", "storage", new) == "# B\n\n" + new + "\n"
    # A rewrite of the whole file keeps both owned sections, whatever their order.
    py_begin, py_end = run.SECTIONS["python"]
    python = py_begin + "\n## Through Python\n" + py_end
    previous = "# Old\n\n" + python + "\n\n" + old + "\n"
    carried = run.carry_sections(previous, "# New\n")
    assert run.section(carried, "storage") == old
    assert run.section(carried, "python") == python
    assert carried.startswith("# New\n")
