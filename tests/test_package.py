"""The installed package: version, native module, exception hierarchy."""

from __future__ import annotations

import builtins
import doctest
import subprocess
import sys

import pytest

import dafka
import dafka.zmtp
from dafka import errors


@pytest.mark.smoke
def test_version_matches_cargo(cargo_version: str) -> None:
    assert dafka.__version__ == cargo_version
    assert dafka._native.__version__ == cargo_version


@pytest.mark.smoke
def test_native_module_is_the_compiled_extension() -> None:
    path = dafka._native.__file__
    assert path is not None
    assert path.endswith((".so", ".pyd")), path
    assert ".abi3." in path, f"expected an abi3 extension, got {path}"


def test_every_error_is_a_dafka_error_and_a_builtin() -> None:
    pairs = {
        errors.InvalidArgumentError: ValueError,
        errors.StateError: RuntimeError,
        errors.TimeoutError: builtins.TimeoutError,
        errors.WouldBlockError: BlockingIOError,
        errors.TransportError: OSError,
    }
    for cls, builtin in pairs.items():
        assert issubclass(cls, dafka.DafkaError)
        assert issubclass(cls, builtin)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), dafka.DafkaError)
        assert getattr(dafka, name) is getattr(errors, name)


def test_import_in_a_fresh_interpreter_is_quick_and_quiet() -> None:
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import dafka; print(dafka.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == dafka.__version__
    assert out.stderr == ""


def test_module_docstring_examples_run() -> None:
    # The examples in the public modules' docstrings are part of the documentation users
    # copy: they must run and print what they show.
    for module in (dafka.zmtp,):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.attempted > 0, module.__name__
        assert result.failed == 0, f"{module.__name__}: {result.failed} example(s) failed"
