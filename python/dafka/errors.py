"""The exceptions dafka raises: one hierarchy under :class:`DafkaError`.

Each class also derives from the built-in exception a Python user would
reach for first, so ``except ValueError`` or ``except TimeoutError`` keep
working alongside ``except dafka.DafkaError``.
"""

from __future__ import annotations

import builtins

__all__ = [
    "ClosedError",
    "DafkaError",
    "HostUnreachableError",
    "InvalidArgumentError",
    "ProtocolError",
    "StateError",
    "StorageError",
    "TimeoutError",
    "TransportError",
    "WouldBlockError",
]


class DafkaError(Exception):
    """Base class of every error raised by dafka."""


class InvalidArgumentError(DafkaError, ValueError):
    """The caller passed something invalid: an endpoint, an option, a socket type."""


class StateError(DafkaError, RuntimeError):
    """The call is not allowed in the object's current state (e.g. REQ sending twice)."""


class TimeoutError(DafkaError, builtins.TimeoutError):
    """A blocking call ran out of time; nothing was consumed or lost."""


class WouldBlockError(DafkaError, BlockingIOError):
    """A non-blocking call could not complete without waiting."""


class ClosedError(DafkaError):
    """The object was closed; no further calls are possible."""


class HostUnreachableError(DafkaError):
    """A message was addressed to a peer that is not connected."""


class ProtocolError(DafkaError):
    """A peer broke the protocol; only that peer's connection was closed."""


class TransportError(DafkaError, OSError):
    """The operating system refused a network operation (address in use, ...)."""


class StorageError(DafkaError, OSError):
    """A store directory could not be opened or recovered (a bad path, a corrupt file)."""
