# Type stubs for the Rust extension module dafka._native, checked against the
# built module by tests/test_stubs.py (mypy.stubtest).

__all__ = ["__version__"]
__version__: str
