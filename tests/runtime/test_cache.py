"""The byte-bounded LRU cache: bound, recency, oversize values, threads."""

from __future__ import annotations

import threading

from refactx_index.tree.cache import ENTRY_OVERHEAD_BYTES, ByteLRUCache


def test_evicts_least_recently_used_within_the_byte_bound():
    cache = ByteLRUCache(3 * (100 + 1 + ENTRY_OVERHEAD_BYTES), sizeof=len)
    for k in b"abc":
        cache.put(bytes([k]), b"x" * 100)
    assert cache.get(b"a") is not None  # a is now the most recent
    cache.put(b"d", b"x" * 100)
    assert b"b" not in cache and b"a" in cache and b"c" in cache and b"d" in cache
    assert cache.nbytes <= cache.max_bytes and len(cache) == 3


def test_replacing_a_key_updates_its_size_and_oversize_values_are_not_kept():
    cache = ByteLRUCache(1000, sizeof=len)
    cache.put(b"k", b"x" * 10)
    cache.put(b"k", b"y" * 20)
    assert cache.get(b"k") == b"y" * 20
    assert cache.nbytes == 20 + 1 + ENTRY_OVERHEAD_BYTES
    cache.put(b"big", b"z" * 5000)
    assert cache.get(b"big") is None and cache.get(b"k") is not None
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


def test_hits_and_misses_are_counted():
    cache = ByteLRUCache(10_000, sizeof=len)
    cache.put(b"a", b"1")
    cache.get(b"a")
    cache.get(b"b")
    assert (cache.hits, cache.misses) == (1, 1)


def test_concurrent_puts_and_gets_keep_the_accounting_exact():
    cache = ByteLRUCache(50 * (8 + 3 + ENTRY_OVERHEAD_BYTES), sizeof=len)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for i in range(3000):
                key = f"{(seed * 7 + i) % 120:03d}".encode()
                if cache.get(key) is None:
                    cache.put(key, key * 2 + b"xy")
                assert cache.nbytes <= cache.max_bytes
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.nbytes == len(cache) * (8 + 3 + ENTRY_OVERHEAD_BYTES)
    assert len(cache) == 50
