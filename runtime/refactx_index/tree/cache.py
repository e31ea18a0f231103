"""A thread-safe least-recently-used cache bounded in bytes.

Used for decoded tree rows (``Fragment``): a lookup path touches a handful of rows,
and generation revisits the same rows step after step, so a small cache answers
almost every warm lookup without a round trip.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

from ..errors import InputRefused

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# A rough per-entry cost of the dict slot, the key object and the value object,
# so that many tiny entries cannot exceed the budget by an order of magnitude.
ENTRY_OVERHEAD_BYTES = 200


class ByteLRUCache(Generic[K, V]):
    """LRU mapping whose total size (``sizeof(value) + len(key)``) stays within ``max_bytes``.

    A value larger than the whole budget is not cached (the caller still gets it).
    All operations take one lock; they are short (dict operations only).
    """

    def __init__(self, max_bytes: int, sizeof: Callable[[V], int]) -> None:
        if max_bytes < 0:
            raise InputRefused("max_bytes must be >= 0")
        self._max_bytes = int(max_bytes)
        self._sizeof = sizeof
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def nbytes(self) -> int:
        """Bytes currently accounted for."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: K) -> bool:
        with self._lock:
            return key in self._data

    def _cost(self, key: K, value: V) -> int:
        klen = len(key) if isinstance(key, (bytes, str, tuple)) else 0
        return int(self._sizeof(value)) + klen + ENTRY_OVERHEAD_BYTES

    def get(self, key: K) -> V | None:
        """The cached value (marking it recently used), or ``None``."""
        with self._lock:
            item = self._data.get(key)
            if item is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: K, value: V) -> None:
        """Insert or replace ``key``, evicting least recently used entries as needed."""
        cost = self._cost(key, value)
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if cost > self._max_bytes:
                return
            # evict first, so the accounted size never exceeds the bound, not even for
            # a moment that another thread could observe
            while self._bytes + cost > self._max_bytes:
                _, (_, evicted) = self._data.popitem(last=False)
                self._bytes -= evicted
            self._data[key] = (value, cost)
            self._bytes += cost

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0
