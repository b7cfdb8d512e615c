"""PySpark's Python worker daemon, importing pyspark compiled once instead of in every worker.

Spark starts its Python workers (the executors' and the driver's planners: a Python data
source's lookup, creation and read planning) with ``$SPARK_HOME/python/lib/pyspark.zip``
first on ``PYTHONPATH``. Python never caches the bytecode of modules it imports from a zip,
so every new daemon compiles pyspark's source again: about 0.5 CPU-s per process here
(0.70 against 0.17 from an installed pyspark), and the first read of a new application
through a Python data source starts up to ten such processes (BENCHMARKS.md, *Spark,
standalone cluster*).

With ``spark.python.daemon.module=dafka.spark_daemon`` Spark runs this module instead of
``pyspark.daemon``. When the interpreter has pyspark installed in the very version of that
zip (the pip package is the usual case: its ``SPARK_HOME`` *is* the installed package), it
moves the zips behind the installed package on ``sys.path``, so pyspark comes from its
compiled ``__pycache__``, then runs ``pyspark.daemon`` unchanged (its forked workers inherit
the path). With another pyspark, or none, next to the zip, the path is left as it is.

The driver's planning workers (a Python data source's lookup, creation and planning: three
processes per application) ignore that setting: Spark 4.2 starts them with
``pyspark.daemon`` whatever it says. ``dafka-spark-python``, this module's :func:`main`
installed as a command next to the interpreter, covers them too: given as the Python Spark
runs (``PYSPARK_PYTHON`` or ``spark.pyspark.python``), it reorders the path the same way,
then runs the module Spark asked for (``-m pyspark.daemon ...``); anything else goes to the
interpreter unchanged.
"""

from __future__ import annotations

import importlib.machinery
import os
import runpy
import sys
import zipfile
from pathlib import Path

__all__ = ["installed_pyspark_first", "main"]


def _zip_version(path: str) -> bytes | None:
    try:
        with zipfile.ZipFile(path) as z:
            return z.read("pyspark/version.py")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def installed_pyspark_first(path: list[str]) -> list[str]:
    """`path` (a ``sys.path``) with Spark's ``pyspark.zip`` and py4j zip moved to its end when
    a pyspark of the zip's very version is installed elsewhere on it; else `path` unchanged."""
    zips = [p for p in path if p.endswith(".zip") and Path(p).name.startswith(("pyspark", "py4j"))]
    ours = next((p for p in zips if Path(p).name.startswith("pyspark")), None)
    if ours is None:
        return path
    rest = [p for p in path if p not in zips]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", rest)
    if spec is None or spec.origin is None:
        return path
    try:
        installed = (Path(spec.origin).parent / "version.py").read_bytes()
    except OSError:
        return path
    if installed != _zip_version(ours):
        return path
    return rest + zips


def main() -> None:
    """``dafka-spark-python ARGS``: ``python ARGS`` with pyspark imported from the installed
    package when it is the version of Spark's zip (see the module's docs)."""
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "-m":
        # As `python -m`: the working directory first on the path, the module's argv.
        sys.path[0] = os.getcwd()
        sys.path[:] = installed_pyspark_first(sys.path)
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    os.execv(sys.executable, [sys.executable, *args])


if __name__ == "__main__":
    sys.path[:] = installed_pyspark_first(sys.path)
    from pyspark.daemon import manager

    manager()
