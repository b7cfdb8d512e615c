"""Option parsing of the Spark zmtp source (no Spark session needed)."""

from __future__ import annotations

import pytest

from dafka.errors import InvalidArgumentError
from dafka.spark import _ZmtpOptions


def test_defaults_and_case_insensitive_keys() -> None:
    o = _ZmtpOptions.parse({"ENDPOINT": "tcp://127.0.0.1:1", "NumPartitions": "3"})
    assert (o.endpoint, o.socket_type, o.num_partitions) == ("tcp://127.0.0.1:1", "PULL", 3)
    assert (o.max_messages, o.idle_timeout, o.batch_size) == (None, 2.0, 10_000)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("numPartitions", "two", "must be an integer"),
        ("numPartitions", "0", "must be > 0"),
        ("maxMessages", "1.5", "must be an integer"),
        ("idleTimeout", "soon", "must be a number"),
        ("idleTimeout", "nan", "must be > 0"),
        ("batchSize", "-4", "must be > 0"),
    ],
)
def test_bad_numbers_are_rejected_with_the_option_named(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{key.lower()} {message}"):
        _ZmtpOptions.parse({"endpoint": "tcp://127.0.0.1:1", key: value})
