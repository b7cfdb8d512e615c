"""The README's examples are real: run them as a user would, in the README's order, from
the built wheel installed with its Spark extra into a brand-new venv, outside the source
tree, with none of the test run's Spark settings in the environment.

Each example's expected output is the one the README states ("This prints ...").
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_tcp_port

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.DOTALL)


def _prints(after: str) -> str:
    """The output the README claims for the example whose code contains `after`."""
    text = README.read_text()
    m = re.search(r"prints `([^`]*)`", text[text.index(after) :])
    assert m, f"README.md states no output after {after!r}"
    return m.group(1)


def test_readme_starts_with_the_two_commands() -> None:
    head = "\n".join(README.read_text().splitlines()[:10])
    assert "make demo" in head and "make test" in head


def test_readme_shows_the_main_job_before_zmtp() -> None:
    text = README.read_text()
    order = [
        text.index("pip install"),
        text.index("dafka.Producer("),
        text.index("dafka produce"),
        text.index('format("dafka")'),
        text.index("dafka.zmtp.Socket"),
    ]
    assert order == sorted(order), order


@pytest.mark.slow
def test_readme_examples_run_from_the_wheel_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env.pop("SPARK_LOCAL_IP", None)  # dafka.spark.local_session sets it

    def run(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, f"{cmd}\n{out.stdout}\n{out.stderr}"
        return out.stdout

    # Install, as written, from the directory that holds dist/.
    (install,) = [b for b in _blocks("sh") if "pip install" in b]
    assert 'pip install "$(ls dist/dafka-*.whl)[spark]"' in install
    checkout = tmp_path / "checkout"  # stands for the clone `make` built the wheel in
    (checkout / "dist").mkdir(parents=True)
    (checkout / "dist" / wheel.name).symlink_to(wheel)
    run(["bash", "-c", install], cwd=checkout)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    python = _blocks("python")
    (produce,) = [b for b in python if "dafka.Producer(" in b]
    (spark,) = [b for b in python if 'format("dafka")' in b]
    (zmtp,) = [b for b in python if "dafka.zmtp.Socket" in b]
    (cli,) = [b for b in _blocks("sh") if "dafka tower" in b]

    out = run(["python", "-c", produce], cwd=elsewhere)
    assert out.strip() == _prints("dafka.Producer("), out

    # The CLI cluster, on a free port instead of 5556 and a store in tmp_path; the tower and
    # the store stay up (in the background, as written) for the Spark example.
    port = free_tcp_port()
    script = cli.replace("5556", str(port)).replace("/tmp/dafka-store", str(tmp_path / "store"))
    # Output to files: the background tower and store keep a pipe open past the script's end.
    log, err = tmp_path / "cli.out", tmp_path / "cli.err"
    with log.open("w") as stdout, err.open("w") as stderr:
        shell = subprocess.Popen(
            ["bash", "-c", script],
            cwd=elsewhere,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        assert shell.wait(timeout=120) == 0, log.read_text() + err.read_text()
        lines = log.read_text().splitlines()
        # the tower's --towers string first
        assert lines[:1] == [f"tcp://127.0.0.1:{port}"], log.read_text() + err.read_text()
        assert lines[-1] == _prints("--max-records 100000"), log.read_text() + err.read_text()

        spark_script = spark.replace("5556", str(port))
        out = run(["python", "-c", spark_script], cwd=elsewhere)
        assert out.strip().splitlines()[-1] == _prints('format("dafka")'), out
    finally:
        # The background tower and store; gone already if they failed (their error is above).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGTERM)

    out = run(["python", "-c", zmtp], cwd=elsewhere)
    assert out.splitlines() == [
        "[b'greeting', b'hello 0']",
        "[b'greeting', b'hello 1']",
        "[b'greeting', b'hello 2']",
    ]
