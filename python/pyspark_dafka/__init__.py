"""Registers the ``dafka`` data source with every Spark session, without a call.

PySpark 4 looks, once per Spark driver, for the top-level modules named ``pyspark_*`` on
the Python path and registers the ``DefaultSource`` each one defines
(``pyspark.sql.worker.lookup_data_sources``). This module is that for ``dafka``: with the
``dafka`` wheel installed (and pyarrow, as ``dafka[spark]`` brings), ``format("dafka")``
works in any session. ``dafka.spark.register(spark)`` still does it by hand (for a session
whose Python runs without this module on its path).
"""

try:
    from dafka._spark_dafka import DafkaDataSource as DefaultSource
except ImportError:  # pragma: no cover - pyarrow missing
    # Spark's lookup imports every pyspark_* module and gives up on all of them when one
    # fails to import: without pyarrow the source is not registered, and nothing else breaks.
    pass
else:
    __all__ = ["DefaultSource"]
