"""Bounded thread pools, one per kind of blocking work the server does off its event loop.

Prompt encoding, index exploration and database checks each get their own threads, so a
flood of one kind never delays the others (a readiness probe never waits behind twenty
explorations), and each admits at most ``workers + max_waiting`` calls: the next is refused
at once (:class:`PoolFull`, which the server answers 503 with ``Retry-After``) instead of
queueing without end. A call holds its place until its thread returns, even when the request
that made it has been answered or has gone away, so the count never undercounts the work a
pool really has.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class PoolFull(Exception):
    """A pool holds as many calls as it admits."""

    def __init__(self, pool: "WorkPool") -> None:
        super().__init__(f"{pool.limit} {pool.name} calls are already running or waiting")
        self.pool = pool


class WorkPool:
    """``workers`` threads named ``refactx-<name>``; at most ``workers + max_waiting`` calls
    admitted at a time (module doc)."""

    def __init__(self, name: str, workers: int, max_waiting: int) -> None:
        if workers < 1 or max_waiting < 0:
            raise ValueError(f"pool {name!r}: workers must be >= 1 and max_waiting >= 0")
        self.name = name
        self.workers = workers
        self.limit = workers + max_waiting
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=f"refactx-{name}")
        self._lock = threading.Lock()
        self.admitted = 0  # running or waiting for a thread
        self.running = 0
        self.done = 0
        self.refused = 0

    def _enter(self) -> None:
        with self._lock:
            if self.admitted >= self.limit:
                self.refused += 1
                raise PoolFull(self)
            self.admitted += 1

    def _leave(self, _future: Any = None) -> None:
        with self._lock:
            self.admitted -= 1
            self.done += 1

    def _call(self, call: Callable[..., T]) -> T:
        with self._lock:
            self.running += 1
        try:
            return call()
        finally:
            with self._lock:
                self.running -= 1

    async def run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)`` on one of the pool's threads; raises :class:`PoolFull`
        at once when the pool admits no more. Cancelling the awaiting task drops a call that
        has not started; one that has runs to its end, holding its place."""
        self._enter()
        try:
            future = self._executor.submit(self._call, functools.partial(call, *args, **kwargs))
        except BaseException:
            self._leave()
            raise
        future.add_done_callback(self._leave)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Drop the calls not started; the running ones end on their own."""
        self._executor.shutdown(wait=False, cancel_futures=True)
