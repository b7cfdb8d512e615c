"""A whole Dafka cluster in this process: one tower and one store on loopback."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from dafka._native import ClusterKeys, Store, Tower

if TYPE_CHECKING:
    from dafka._native import _Sync

__all__ = ["LocalCluster"]


class LocalCluster:
    """A tower and a store in this process, on loopback ephemeral ports.

    ``path`` is the store's directory; ``None`` uses a temporary directory,
    removed on :meth:`close`. Hand :attr:`towers` to producers and consumers.

    ``curve`` (a :class:`dafka.ClusterKeys`) runs the tower and the store over CURVE with
    those keys (their member key must be in its ``allowed_keys``); producers and consumers
    then need ``curve=`` keys of the same cluster, with their member keys allowed.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        sync: _Sync = "always",
        curve: ClusterKeys | None = None,
    ) -> None:
        self._tmp: str | None = None
        if path is None:
            self._tmp = tempfile.mkdtemp(prefix="dafka-cluster-")
            path = self._tmp
        self.path = Path(path)
        self._store: Store | None = None
        try:
            self._tower: Tower | None = Tower(sub="tcp://127.0.0.1:0", curve=curve)
            self.towers: str = self._tower.towers
            self._store = Store(str(self.path), towers=self.towers, sync=sync, curve=curve)
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._tower is None

    def close(self) -> None:
        """Stops the store and the tower; removes the temporary directory if any."""
        store, self._store = self._store, None
        tower, self._tower = getattr(self, "_tower", None), None
        try:
            if store is not None:
                store.close()
            if tower is not None:
                tower.close()
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dafka.LocalCluster towers={self.towers!r} path={str(self.path)!r}>"
