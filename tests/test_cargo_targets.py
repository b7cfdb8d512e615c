"""Cargo puts every example of the workspace in one directory (`target/<profile>/examples`):
two examples of one name in two crates overwrite each other's binary, and cargo warns on
every build that this "may become a hard error in the future"."""

import json
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_two_workspace_examples_or_binaries_share_a_name() -> None:
    cargo = shutil.which("cargo")
    assert cargo is not None, "cargo is needed (make test builds the workspace with it)"
    metadata = json.loads(
        subprocess.run(
            [cargo, "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    )
    owners: dict[tuple[str, str], list[str]] = defaultdict(list)
    for package in metadata["packages"]:
        for target in package["targets"]:
            for kind in target["kind"]:
                if kind in ("example", "bin"):
                    owners[(kind, target["name"])].append(package["name"])
    clashes = {key: crates for key, crates in owners.items() if len(crates) > 1}
    assert not clashes, f"rename one of each: {clashes}"
