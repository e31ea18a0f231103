"""Rows are bounded before they are trusted: a hostile or corrupt row is refused with a
FormatError at a cost of a few MB and milliseconds, never gigabytes or minutes."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import numpy as np
import pytest

from refactx_index import format as fmt
from refactx_index.errors import FormatError

HEADER = struct.Struct("<BBBBBBI")  # version 1's header: no checksum to get past


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def test_a_header_claiming_too_many_nodes_is_refused_before_allocating():
    row = HEADER.pack(1, 0, 4, 4, 4, 0, 1 << 26) + b"\0" * 16
    with pytest.raises(FormatError, match="claims"):
        fmt.decode_fragment(row)


def test_a_decompression_bomb_inflates_no_further_than_the_header_allows():
    n = fmt.MAX_FRAGMENT_NODES
    bomb = zlib.compress(b"\0" * (200 << 20), 9)  # 200 MB of zeros in a few hundred KB
    row = HEADER.pack(1, 1, 1, 1, 1, 0, n) + bomb

    def decode():
        with pytest.raises(FormatError, match="inflates past"):
            fmt.decode_fragment(row)

    assert peak_bytes(decode) < 64 << 20


def test_a_long_chain_is_refused_by_its_depth_not_walked_for_minutes():
    n = 200_000
    chain = fmt.encode_fragment(
        tokens=np.ones(n - 1, dtype=np.int64), child_count=np.r_[np.ones(n - 1, dtype=np.int64), 0],
        ends=np.r_[np.zeros(n - 1, dtype=bool), True], external=np.zeros(n, dtype=bool),
        ext_leaves=np.zeros(0, dtype=np.int64),
    )
    assert len(chain) < 2000  # a few hundred bytes on disk
    with pytest.raises(FormatError, match="deeper than"):
        fmt.decode_fragment(chain)


def test_encoders_refuse_rows_past_the_bound():
    n = fmt.MAX_FRAGMENT_NODES + 1
    with pytest.raises(ValueError, match="MAX_FRAGMENT_NODES"):
        fmt.encode_fragment(
            tokens=np.ones(n - 1, dtype=np.int64), child_count=np.r_[n - 1, np.zeros(n - 1, dtype=np.int64)],
            ends=np.r_[False, np.ones(n - 1, dtype=bool)], external=np.zeros(n, dtype=bool),
            ext_leaves=np.zeros(0, dtype=np.int64),
        )


def test_a_body_longer_than_the_header_allows_is_refused():
    good = fmt.encode_subtree([(1, 2), (1, 3)], compress=False)
    with pytest.raises(FormatError):
        fmt.decode_fragment(good + b"\0" * 64)
    assert fmt.decode_fragment(good).n_nodes == 4
