"""The fuzz workspace (fuzz/, its own Cargo.lock) shares the root's target directory in
`make fuzz-build`. Cargo reuses a dependency's build there only when its whole build graph
resolves the same: same versions, same features. libsodium and OpenSSL are built from C
source by their build scripts (about 2.5 minutes of `make test` from a clean clone, each
time), so a version that drifts between the two lockfiles in that graph builds both twice.
"""

import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def versions(lock: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for pkg in tomllib.loads(lock.read_text())["package"]:
        if "source" in pkg:  # registry crates; our own path crates have no source
            out[pkg["name"]].add(pkg["version"])
    return out


def test_the_fuzz_lockfile_pins_every_shared_crate_at_the_roots_version() -> None:
    root = versions(ROOT / "Cargo.lock")
    fuzz = versions(ROOT / "fuzz" / "Cargo.lock")
    # The root may hold more versions of a crate (other dependents); each the fuzz workspace
    # uses must be one of them.
    drift = {
        name: (sorted(root[name]), sorted(fuzz[name]))
        for name in sorted(root.keys() & fuzz.keys())
        if not fuzz[name] <= root[name]
    }
    assert not drift, (
        "fuzz/Cargo.lock and Cargo.lock disagree (name: (root, fuzz)); pin the fuzz side with "
        f"`cd fuzz && cargo update -p NAME --precise VERSION`: {drift}"
    )


def test_cc_has_the_fuzz_workspaces_features_in_the_root() -> None:
    # libfuzzer-sys turns on cc's "parallel" (which pulls in jobserver); the root asks for it
    # too (root Cargo.toml, `cc`), or every C build script's hash differs between the two.
    root = versions(ROOT / "Cargo.lock")
    assert "jobserver" in root, "the root Cargo.toml no longer asks for cc's `parallel` feature"


def test_the_fuzz_workspace_builds_build_scripts_with_the_roots_profile() -> None:
    # A profile that differs (for build scripts, for openssl-sys, or the debug level of the
    # crates both build) gives the shared units other hashes in fuzz/ than in the root, and
    # `make fuzz-build` compiles them again.
    def profiles(path: Path) -> dict:
        dev = tomllib.loads(path.read_text()).get("profile", {}).get("dev", {})
        return {
            "debug": dev.get("debug"),
            "build-override": dev.get("build-override"),
            "openssl-sys": dev.get("package", {}).get("openssl-sys"),
        }

    root = profiles(ROOT / "Cargo.toml")
    # Build scripts' dependencies (libc, cc) are also the crates' dependencies: one unit each
    # only when build scripts get the debug level the rest of a dev build has.
    assert root["build-override"] == {"debug": root["debug"]}, root
    assert profiles(ROOT / "fuzz" / "Cargo.toml") == root
