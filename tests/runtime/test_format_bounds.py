"""Rows are bounded before they are trusted: a hostile or corrupt row is refused with a
FormatError at a cost of a few MB and milliseconds, never gigabytes or minutes."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import numpy as np
import pytest
import zstandard

from refactx_index.tree import format as fmt
from refactx_index.errors import FormatError

HEADER = struct.Struct("<BBBBBBI")  # version 1's header: no checksum to get past


@pytest.fixture(autouse=True, params=sorted(fmt.DECODERS))
def decoder(request, monkeypatch):
    """Every bound holds for each decoder this runtime has (compiled and numpy)."""
    monkeypatch.setattr(fmt, "DECODER", request.param)
    return request.param


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


def _chain(n: int) -> bytes:
    """A row of one path of ``n`` nodes: a fact of n - 1 tokens, each node the next one's parent."""
    return fmt.encode_fragment(
        tokens=np.ones(n - 1, dtype=np.int64), child_count=np.r_[np.ones(n - 1, dtype=np.int64), 0],
        ends=np.r_[np.zeros(n - 1, dtype=bool), True], external=np.zeros(n, dtype=bool),
        ext_leaves=np.zeros(0, dtype=np.int64),
    )


def test_a_long_chain_is_refused_by_its_depth_not_walked_for_minutes():
    n = 200_000
    chain = _chain(n)
    # compressed, 200,000 nodes would fit in a few hundred bytes, more than a row of that size
    # may claim: the encoder stores it plain, and the decoder refuses it by its depth
    assert len(chain) > 2 * n
    with pytest.raises(FormatError, match="deeper than"):
        fmt.decode_fragment(chain)
    head = HEADER.unpack_from(chain)
    packed = forge(chain[14:], n, *head[2:5])
    assert len(packed) < 2000  # what a forger can write: refused by its size before its depth
    with pytest.raises(FormatError, match="stored bytes"):
        fmt.decode_fragment(packed)


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


def forge(body: bytes, n: int, tw: int, cw: int, lw: int, *, compress: bool = True) -> bytes:
    """A version 2 row with a valid checksum around any body: what a forger can write."""
    flags = 0
    if compress:
        body, flags = zlib.compress(body, 9), 1
    head = HEADER.pack(2, flags, tw, cw, lw, 0, n)
    return head + struct.pack("<I", zlib.crc32(body, zlib.crc32(head))) + body


def root_with_children(tokens: np.ndarray) -> bytes:
    """The body of a row whose root has ``tokens`` as children, each a fact of its own."""
    n = tokens.size + 1
    nb = (n + 7) // 8
    counts = np.zeros(n, dtype="<u4")
    counts[0] = n - 1
    ends = np.packbits(np.r_[False, np.ones(n - 1, dtype=bool)]).tobytes()
    return tokens.astype("<u1").tobytes() + counts.tobytes() + ends + bytes(nb)


def test_two_million_identical_children_in_ten_kb_are_refused_before_allocating():
    """The 10.7 KB row of 2,097,151 children that are all the same token
    cost +118 MB and 0.3 s to decode; its node count is past what its stored size allows."""
    n = fmt.MAX_FRAGMENT_NODES
    row = forge(root_with_children(np.full(n - 1, 7)), n, 1, 4, 1)
    assert len(row) < 16_000

    def decode():
        with pytest.raises(FormatError, match="stored bytes"):
            fmt.decode_fragment(row)

    assert peak_bytes(decode) < 1 << 20  # refused from the header: nothing allocated


@pytest.mark.parametrize("children", [[7, 7], [3, 9, 9], [9, 3], [1, 5, 4, 8]])
def test_duplicate_or_unsorted_siblings_are_refused(children):
    tokens = np.array(children)
    for compress in (False, True):
        row = forge(root_with_children(tokens), tokens.size + 1, 1, 4, 1, compress=compress)
        with pytest.raises(FormatError, match="duplicate or unsorted"):
            fmt.decode_fragment(row)


def test_duplicate_siblings_deep_in_a_row_are_refused():
    good = fmt.encode_subtree([(1, 2, 3), (1, 2, 4), (1, 5)], compress=False)
    frag = fmt.decode_fragment(good)
    # BFS: 0 -> 1 -> {2, 5} -> {3, 4}; make the last two siblings equal
    tokens = frag.tokens[1:].copy()
    tokens[-1] = tokens[-2]
    bad = fmt.encode_fragment(tokens, frag.child_count, frag.ends, frag.external,
                              np.zeros(0, dtype=np.int64), compress=False)
    with pytest.raises(FormatError, match="duplicate or unsorted"):
        fmt.decode_fragment(bad)


def test_child_counts_that_make_a_node_its_own_parent_are_refused():
    # 3 nodes, the root without children, node 1 with two: node 1 would be its own child
    body = bytes([5, 6]) + bytes([0, 2, 0]) + bytes([0b01100000]) + bytes(1)
    with pytest.raises(FormatError, match="before its parent"):
        fmt.decode_fragment(forge(body, 3, 1, 1, 1, compress=False))


def test_a_version_1_row_is_refused_inside_a_version_2_build():
    blob = fmt.encode_subtree([(1, 2), (1, 3)])
    v1 = bytes([1]) + blob[1:10] + blob[14:]  # the same row without its checksum
    assert fmt.decode_fragment(v1).n_nodes == 4  # readable on its own (version 1 builds)
    assert fmt.decode_fragment(v1, 1).n_nodes == 4
    with pytest.raises(FormatError, match="version 1 row inside a format version 2 build"):
        fmt.decode_fragment(v1, 2)
    with pytest.raises(FormatError, match=f"version {fmt.FORMAT_VERSION} row inside a format version 1 build"):
        fmt.decode_fragment(blob, 1)
    with pytest.raises(FormatError, match=f"version 1 row inside a format version {fmt.FORMAT_VERSION} build"):
        fmt.decode_fragment(v1, fmt.FORMAT_VERSION)


def test_a_huge_repetitive_subtree_is_stored_so_that_it_decodes():
    """A complete row of 250k nodes whose facts share one long tail compresses to ~27 nodes
    per byte, past the decoder's ratio: the encoder stores it plain instead."""
    seqs = [[100 + i] + [5000 + j for j in range(60)] for i in range(4096)]
    row = fmt.encode_subtree(seqs)
    frag = fmt.decode_fragment(row)
    assert frag.n_nodes == 1 + 4096 * 61 <= fmt.max_nodes_for(len(row))
    assert int(frag.leaves[0]) == 4096


# The documented figure (docs/tree.md): decoding a row costs at most this many bytes of memory
# per node at peak (numpy arrays and temporaries, the inflated body included; measured 55-72)
DECODE_BYTES_PER_NODE = 100


@pytest.mark.parametrize("shape", ["expanded", "complete", "forged at the bound"])
def test_decode_memory_is_bounded_by_the_stored_size(shape):
    """Decode memory is at most DECODE_BYTES_PER_NODE x the nodes a row of its stored size
    may hold: max(NODES_ANY_ROW, NODES_PER_STORED_BYTE x stored bytes)."""
    if shape == "expanded":  # a vocabulary's worth of children
        row = fmt.encode_children(np.arange(151_000), np.arange(1, 151_001), False)
    elif shape == "complete":
        row = fmt.encode_subtree([[100 + i] + [5000 + j for j in range(31)] for i in range(1024)])
    else:  # the most nodes a forged row of this size may claim, distinct sorted tokens
        n = fmt.NODES_ANY_ROW
        row = forge(root_with_children(np.arange(n - 1) % 256), n, 1, 4, 1)
        with pytest.raises(FormatError, match="duplicate or unsorted"):
            fmt.decode_fragment(row)
    allowed = fmt.max_nodes_for(len(row))
    peak = peak_bytes(lambda: _decode_quietly(row))
    assert peak <= DECODE_BYTES_PER_NODE * allowed, (shape, peak, allowed)


def _decode_quietly(row: bytes) -> None:
    try:
        fmt.decode_fragment(row)
    except FormatError:
        pass


def forge_with_dictionary(body: bytes, n: int, tw: int, cw: int, lw: int,
                          dictionary: fmt.PresetDictionary) -> bytes:
    """A version 3 row compressed against ``dictionary`` with a valid checksum around any body."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, dictionary.data)
    packed = deflater.compress(body) + deflater.flush()
    head = HEADER.pack(3, 2, tw, cw, lw, 0, n)
    return head + struct.pack("<I", zlib.crc32(packed, zlib.crc32(head, dictionary.crc))) + packed


def test_dictionary_rows_are_held_to_the_same_bounds():
    """A dictionary that holds a row's whole body lets a forger store it in a few bytes: the
    node count is still bounded by the stored size, and nothing inflates past the header."""
    n = fmt.MAX_FRAGMENT_NODES
    body = root_with_children(np.full(n - 1, 7))
    dictionary = fmt.PresetDictionary(body[: fmt.MAX_DICTIONARY_BYTES])
    row = forge_with_dictionary(body, n, 1, 4, 1, dictionary)

    def decode():
        with pytest.raises(FormatError, match="stored bytes"):
            fmt.decode_fragment(row, 3, dictionary)

    assert peak_bytes(decode) < 1 << 20
    # a bomb: zeros far past the largest body a legal header allows
    zeros = fmt.PresetDictionary(bytes(fmt.MAX_DICTIONARY_BYTES))
    bomb = forge_with_dictionary(bytes(200 << 20), n, 1, 1, 1, zeros)

    def inflate():
        with pytest.raises(FormatError, match="inflates past"):
            fmt.decode_fragment(bomb, 3, zeros)

    assert peak_bytes(inflate) < 64 << 20


def forge_zstd(body: bytes, n: int, tw: int, cw: int, lw: int, dictionary: fmt.PresetDictionary,
               *, content_size: bool = True, tail: bytes = b"") -> bytes:
    """A version 4 row: any body, zstd-compressed against ``dictionary``, with a valid checksum."""
    params = zstandard.ZstdCompressionParameters.from_level(
        3, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=False,
        write_content_size=content_size, write_dict_id=False)
    packed = zstandard.ZstdCompressor(dict_data=zstandard.ZstdCompressionDict(dictionary.data),
                                      compression_params=params).compress(body) + tail
    head = HEADER.pack(4, 4, tw, cw, lw, 0, n)
    return head + struct.pack("<I", zlib.crc32(packed, zlib.crc32(head, dictionary.crc))) + packed


def test_zstd_rows_are_held_to_the_same_bounds():
    """Version 4: the frame's content size is bounded by the header before anything is
    allocated; a frame that hides its size, or that does not end where the row does, is
    refused."""
    n = fmt.NODES_ANY_ROW  # a node count any row may claim: the bomb is its body's size
    zeros = fmt.PresetDictionary(bytes(fmt.MAX_DICTIONARY_BYTES))
    bomb = forge_zstd(bytes(200 << 20), n, 1, 1, 1, zeros)
    assert len(bomb) < 1 << 20  # 200 MB of zeros in a few kB

    def inflate():
        with pytest.raises(FormatError, match="inflates past"):
            fmt.decode_fragment(bomb, 4, zeros)

    assert peak_bytes(inflate) < 1 << 20
    body = root_with_children(np.arange(1, 40))
    good = forge_zstd(body, 40, 1, 4, 1, zeros)
    assert fmt.decode_fragment(good, 4, zeros).n_nodes == 40
    for forged, reason in ((forge_zstd(body, 40, 1, 4, 1, zeros, content_size=False), "inflates past"),
                           (forge_zstd(body, 40, 1, 4, 1, zeros, tail=b"\0\0\0\0"), "does not decompress"),
                           (forge_zstd(body[:-1], 40, 1, 4, 1, zeros), "truncated|length")):
        with pytest.raises(FormatError, match=reason):
            fmt.decode_fragment(forged, 4, zeros)


def test_the_dictionary_encoder_stores_plain_rather_than_past_the_ratio():
    n = 200_000
    chain = _chain(n)
    dictionary = fmt.PresetDictionary(chain[14:][: fmt.MAX_DICTIONARY_BYTES])
    row = fmt.with_dictionary(chain, dictionary)
    assert row[1] == 0 and len(row) > 2 * n
    assert n <= fmt.max_nodes_for(len(row))
