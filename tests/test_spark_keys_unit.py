"""_spark_keys without a Spark session: Towers hashing and the allowedKeys error text."""

from __future__ import annotations

import pytest

from dafka._spark_keys import ALLOWED, CLUSTER, MEMBER, Towers, parse
from dafka.errors import InvalidArgumentError
from dafka.zmtp import curve_keypair


def test_keyless_towers_hash_like_the_equal_str() -> None:
    t = Towers("127.0.0.1:5670")
    assert t == "127.0.0.1:5670"
    assert hash(t) == hash("127.0.0.1:5670")
    assert len({t, "127.0.0.1:5670"}) == 1


def test_a_secret_pasted_in_allowed_keys_is_not_echoed() -> None:
    pub, sec = curve_keypair()
    _, sec2 = curve_keypair()
    opts = {CLUSTER: sec, MEMBER: sec2, ALLOWED: f"{pub}, {sec2[:-1]}"}
    with pytest.raises(InvalidArgumentError) as e:
        parse(opts, "127.0.0.1:5670")
    msg = str(e.value)
    assert "entry 1" in msg
    assert sec2[:-1] not in msg and sec not in msg
