"""Subcommands of the ``dafka`` command line, one module each (see :mod:`dafka.cli`)."""
