"""Registers the ``dafka`` data source with every Spark session, without a call.

PySpark 4 looks, once per Spark driver, for the top-level modules named ``pyspark_*`` on
the Python path and registers the ``DefaultSource`` each one defines
(``pyspark.sql.worker.lookup_data_sources``). This module is that for ``dafka``: with the
``dafka`` wheel installed (and pyarrow, as ``dafka[spark]`` brings), ``format("dafka")``
works in any session. ``dafka.spark.register(spark)`` still does it by hand (for a session
whose Python runs without this module on its path).
"""

from importlib.util import find_spec

# Spark's lookup imports every pyspark_* module and gives up on all of them when one fails
# to import: without pyarrow (or pyspark) the source is not registered, and nothing else
# breaks. pyarrow is looked for, not imported: the source imports it only where it makes or
# reads batches, and the lookup runs in a Python process of its own on the driver of every
# application.
if find_spec("pyarrow") is not None:
    try:
        from dafka._spark_dafka import DafkaDataSource as DefaultSource
    except ImportError:  # pragma: no cover - pyspark missing
        pass
    else:
        __all__ = ["DefaultSource"]
