"""Test helpers over trees built in Python, needing neither a database nor the pipeline: random facts and
their brute-force answers, and rows rewritten as older format versions wrote them."""

from __future__ import annotations

import struct
import zlib
from typing import Sequence

import numpy as np


def as_version_2(node: bytes) -> bytes:
    """A current row without a dictionary as version 2 wrote it (the version byte differs,
    and so the checksum)."""
    head = bytes([2]) + node[1:10]
    return head + struct.pack("<I", zlib.crc32(node[14:], zlib.crc32(head))) + node[14:]


def as_version_4(node: bytes, dictionary) -> bytes:
    """A current row as format version 4 wrote it: its token ids 4 bytes wide (version 5
    stores ids below 2**24 in 3), the body compressed by zstd against ``dictionary`` (when
    it was), the version byte and the checksum to match."""
    version, flags, tw, cw, lw, _, n = struct.unpack_from("<BBBBBBI", node)
    body = dictionary.decompressor().decompress(node[14:]) if flags & 4 else (
        zlib.decompress(node[14:]) if flags & 1 else node[14:])
    if tw == 3:
        ids = np.frombuffer(body, np.uint8, 3 * (n - 1)).reshape(n - 1, 3)
        body = np.concatenate([ids, np.zeros((n - 1, 1), np.uint8)], axis=1).tobytes() + body[3 * (n - 1):]
        tw = 4
    if flags & 4:
        body = dictionary.compressor().compress(body)
    elif flags & 1:
        body = zlib.compress(body, 6)
    head = struct.pack("<BBBBBBI", 4, flags, tw, cw, lw, 0, n)
    seed = zlib.crc32(head, dictionary.crc) if flags & 4 else zlib.crc32(head)
    return head + struct.pack("<I", zlib.crc32(body, seed)) + body


def expected_next(seqs: set[tuple[int, ...]], prefix: Sequence[int]) -> tuple[dict[int, int], bool]:
    """Brute-force answer: {child token: leaves}, ends -- what every index must return."""
    p = tuple(prefix)
    children: dict[int, int] = {}
    for s in seqs:
        if len(s) > len(p) and s[: len(p)] == p:
            children[s[len(p)]] = children.get(s[len(p)], 0) + 1
    return children, p in seqs


def random_sequences(seed: int, n: int = 300, alphabet: int = 6, max_len: int = 7) -> set[tuple[int, ...]]:
    """Small random facts over a tiny alphabet: many shared prefixes, facts that are
    prefixes of other facts, wide and deep nodes."""
    import random

    rng = random.Random(seed)
    return {tuple(rng.randrange(alphabet) * 37 + 1 for _ in range(rng.randint(1, max_len)))
            for _ in range(n)}
