"""CURVE keys for the ``dafka`` Spark source and sink: the ``curve.*`` options.

An encrypted cluster (docs/security.md, "Dafka over CURVE") is joined with a
``dafka.ClusterKeys``; Spark options are strings, so its three parts come as Z85 text:

* ``curve.clusterSecretKey``: the cluster's secret key (the same on every member);
* ``curve.memberSecretKey``: this job's member secret key (its public key must be on the
  cluster members' allow-lists);
* ``curve.allowedKeys``: the member public keys allowed to connect to the job's nodes (the
  stores', for reading and writing), comma-separated.

The names hold "secret" so that Spark's default ``spark.redaction.regex`` hides their values
in plans and the UI. They are checked on the driver, all three or none, with a message naming
the option and never its value. They travel to the executors inside the ``towers`` value
(:class:`Towers`), which every reader and producer of the source is built from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from dafka.errors import InvalidArgumentError

if TYPE_CHECKING:
    from dafka._native import ClusterKeys

# Lower case, as Spark hands options over; the spelling users write, for messages.
CLUSTER = "curve.clustersecretkey"
MEMBER = "curve.membersecretkey"
ALLOWED = "curve.allowedkeys"
NAMES = {
    CLUSTER: "curve.clusterSecretKey",
    MEMBER: "curve.memberSecretKey",
    ALLOWED: "curve.allowedKeys",
}
OPTIONS = frozenset(NAMES)

Keys = tuple[str, str, tuple[str, ...]]


class Towers(str):
    """The ``towers`` option and the keys to join that cluster with (``None``: plaintext).

    Equal, and hashed, by both: the per-process caches of readers and producers keyed by the
    towers keep keyed and plaintext nodes (or nodes with other keys) apart. Its ``repr`` is the
    towers string's: no key shows in a plan or a log. Any ``str`` operation (slicing,
    ``strip``, ``+``, ``str(...)``) returns a plain ``str`` and drops the keys."""

    keys: Keys | None

    def __new__(cls, towers: str, keys: Keys | None = None) -> Self:
        self = super().__new__(cls, towers)
        self.keys = keys
        return self

    def __reduce__(self) -> tuple[type[Towers], tuple[str, Keys | None]]:
        return (Towers, (str(self), self.keys))

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other) is True and getattr(other, "keys", None) == self.keys

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        # Equal objects hash equally: a keyless Towers equals the plain str, so hashes as it.
        if self.keys is None:
            return str.__hash__(self)
        return hash((str(self), self.keys))

    def cluster_keys(self) -> ClusterKeys | None:
        """The ``dafka.ClusterKeys`` for ``curve=`` (``None`` without keys)."""
        if self.keys is None:
            return None
        import dafka

        cluster, member, allowed = self.keys
        return dafka.ClusterKeys(cluster, member, list(allowed))


def parse(opts: dict[str, str], towers: str) -> Towers:
    """``towers`` with the keys the ``curve.*`` options in ``opts`` (lower-case keys) give,
    checked at once: all three or none, each a valid key."""
    given = {k: opts[k].strip() for k in OPTIONS if k in opts}
    if not given:
        return Towers(towers)
    for k in (CLUSTER, MEMBER, ALLOWED):
        if not given.get(k):
            raise InvalidArgumentError(
                f"option {NAMES[k]} is missing or empty: an encrypted cluster needs "
                f"{NAMES[CLUSTER]}, {NAMES[MEMBER]} and {NAMES[ALLOWED]}"
            )
    from dafka.zmtp import curve_public

    for k in (CLUSTER, MEMBER):
        try:
            curve_public(given[k])
        except (ValueError, TypeError):
            # Never the value: it is a secret.
            raise InvalidArgumentError(
                f"option {NAMES[k]} must be a secret key in Z85 (40 characters)"
            ) from None
    allowed = tuple(a.strip() for a in given[ALLOWED].split(",") if a.strip())
    towers_with_keys = Towers(towers, (given[CLUSTER], given[MEMBER], allowed))
    import dafka

    # The secrets are valid by now: what is refused is a public key of the list. Only the
    # entry's index is named: the native error text might echo a secret pasted there.
    for i, a in enumerate(allowed):
        try:
            dafka.ClusterKeys(given[CLUSTER], given[MEMBER], [a])
        except ValueError:
            raise InvalidArgumentError(
                f"option {NAMES[ALLOWED]} must be public keys in Z85 (40 characters), "
                f"comma-separated: entry {i} is not"
            ) from None
    return towers_with_keys


def curve_of(towers: str) -> ClusterKeys | None:
    """``curve=`` for a node of ``towers`` (a :class:`Towers`, or a plain string: none)."""
    return towers.cluster_keys() if isinstance(towers, Towers) else None
