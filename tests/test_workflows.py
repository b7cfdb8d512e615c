"""The GitHub workflows are valid YAML and say what the release process needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def _load(repo: Path, name: str) -> dict[Any, Any]:
    with open(repo / ".github" / "workflows" / name) as f:
        doc = yaml.safe_load(f)
    assert isinstance(doc, dict)
    # YAML 1.1 reads the key `on` as the boolean True.
    assert "on" in doc or True in doc
    assert isinstance(doc["jobs"], dict) and doc["jobs"]
    for job in doc["jobs"].values():
        assert "runs-on" in job
        assert isinstance(job["steps"], list) and job["steps"]
    return doc


def test_ci_runs_the_ci_script(repo: Path) -> None:
    doc = _load(repo, "ci.yml")
    runs = [s.get("run", "") for job in doc["jobs"].values() for s in job["steps"]]
    assert any("bash .ci/run" in r for r in runs)
    ci_script = (repo / ".ci" / "run").read_text()
    assert "make test" in ci_script


def test_wheels_cover_every_platform_and_publish(repo: Path) -> None:
    doc = _load(repo, "wheels.yml")
    jobs = doc["jobs"]
    built = set()
    for name in ("linux", "macos"):
        for entry in jobs[name]["strategy"]["matrix"]["include"]:
            built.add((name, entry["target"]))
        uses = [s.get("uses", "") for s in jobs[name]["steps"]]
        assert any(u.startswith("PyO3/maturin-action@") for u in uses)
        # Every wheel passes the smoke tests on its runner before the release job runs.
        runs = [s.get("run", "") for s in jobs[name]["steps"]]
        assert any("-m smoke" in r and "dist/*.whl" in r for r in runs), name
    assert built == {
        ("linux", "x86_64"),
        ("linux", "aarch64"),
        ("macos", "x86_64"),
        ("macos", "aarch64"),
    }
    sdist = jobs["sdist"]["steps"]
    assert any(s.get("with", {}).get("command") == "sdist" for s in sdist)
    release = jobs["release"]
    assert release["permissions"]["id-token"] == "write"  # trusted publishing
    assert set(release["needs"]) == {"linux", "macos", "sdist"}
    assert any(
        s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in release["steps"]
    )
