"""The subcommands of the ``dafka`` command (see :mod:`dafka.cli`)."""
