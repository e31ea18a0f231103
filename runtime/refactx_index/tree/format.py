"""The one definition of the stored tree format, shared by the Spark jobs and the runtime.

A build is a set of rows ``(prefix, node)``:

* ``prefix`` -- the token ids of a stored prefix, each a big-endian ``uint32``
  (so byte order equals token order); the root is the empty string.
* ``node`` -- a *fragment*: the part of the tree below ``prefix`` that is stored in
  this row, as a breadth-first trie. Node 0 is the row's own prefix. A fragment
  node is either complete (all its descendants are in the fragment) or
  *external*: its children live in the row keyed by its own full prefix, and the
  fragment records only its leaf count.

Which prefixes get rows is the build's cut rule (see ``refactx_pipeline/stages/prefix_rows.py``):
a prefix with more than ``T`` facts below it and shorter than ``D`` tokens is
expanded one level (its children are external); any other row root stores its
whole subtree. ``T = 1`` makes every single-fact tail its own row; ``len == D`` is the
depth cut.

Fragment encoding, version 2 (all integers little-endian)::

    header  <BBBBBBII  version=2, flags, token_width, count_width, leaves_width, 0, n_nodes,
                       crc32 of the header's first 10 bytes and the body as stored
    body    tokens        token_width  x (n_nodes - 1)   token of nodes 1..n-1
            child_count   count_width  x n_nodes         children per node (BFS order)
            ends          bitmap, ceil(n_nodes / 8) bytes, np.packbits order
            external      bitmap, ceil(n_nodes / 8) bytes
            ext_leaves    leaves_width x popcount(external)

Version 1 is the same without the crc32 (``<BBBBBBI``); the runtime still reads it, in a
version 1 build only (``decode_fragment(row, version)``: a checksum-less row inside a version
2 build is refused). The checksum turns a flipped bit (a token id, a count) into a
``FormatError`` instead of a silent wrong answer.

Version 3 is version 2 plus ``flags`` bit 1: the body is raw deflate (no zlib
wrapper: the crc32 already guards it) compressed against the build's *preset dictionary*
(``zdict``; :class:`PresetDictionary`, at most 32 KiB, deflate's window), made per build from
a deterministic sample of its own row bodies and stored with the build (the catalog's
``refactx.build_dictionaries``, the ``.rfx`` file). Rows hold about a dozen facts, too little
for a compressor to learn their vocabulary of token bytes; the dictionary gives every row
that history up front (docs/tree.md, "Row format"). The crc32 of such a row is seeded with
the dictionary's own crc32 (it is the crc32 of dictionary, header and stored body, in that
order), so a row read with another build's dictionary is a checksum ``FormatError``, and one
read without a dictionary is refused before anything is inflated. Builds of version 3 are
still read; none is written.

Version 4 is version 3 with zstd in place of deflate: ``flags`` bit 2 marks
a body compressed by zstd (a magicless frame: no magic number, dictionary id or checksum,
its content size written) against the build's dictionary, a *trained* zstd dictionary of at
most 64 KiB (:func:`make_dictionary`: ``zstd.train_dictionary`` over the sampled bodies, its
entropy tables included). Measured on the realistic 1M-fact build (docs/tree.md): 0.7 B per
fact smaller than version 3, compressed about 6x faster (the build's dictionary pass) and
inflated about 2x faster (the walk's large rows). The checksum, its seeding and the bounds
are those of version 3.

Version 5 (the one written) is version 4 with one more token width: token ids below
``2**24`` (every vocabulary's: Qwen2.5's 151k, Llama 3's 128k) that would take 4 bytes take 3
(``token_width`` 3), so a row's body carries no byte that is always zero; zstd stores the same
facts in fewer bytes (docs/tree.md, "Row format"). Nothing else changes: header, flags,
checksum, dictionary and bounds are version 4's. Version 4 builds are still read; a width of 3
in a row of an earlier version is a ``FormatError``.

``flags`` bit 0: the body is zlib-compressed (used when that is smaller). Widths
are the smallest of 1, 2, 4, 8 bytes that hold the largest value (tokens: also 3, version 5).
In BFS order the children of every node are contiguous and sorted by token, so decoding is a few
linear passes: in compiled code (``_fragment.c``, built where the runtime is installed with
a C compiler) or a handful of numpy calls (``DECODER``); no per-element Python work, and no
``pickle``.

Leaf counts are not stored for complete nodes: ``leaves = ends + ext_leaves +
sum(leaves of children)`` is recomputed on decode (one pass from the last node back in the
compiled decoder; by pointer doubling over the BFS levels in numpy).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import zstandard

from ..errors import FormatError, InputRefused

try:  # built from _fragment.c where the runtime was installed with a C compiler
    from . import _fragment
except ImportError:  # numpy decodes the same rows (slower on large ones)
    _fragment = None

FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)  # builds written in versions 1 to 4 are still served
_HEADER_V1 = struct.Struct("<BBBBBBI")
_HEADER = struct.Struct("<BBBBBBII")
_FLAG_ZLIB = 1
_FLAG_ZDICT = 2  # version 3: raw deflate against the build's preset dictionary
_FLAG_ZSTD = 4  # version 4: zstd against the build's preset dictionary
_FLAGS_DICTIONARY = _FLAG_ZDICT | _FLAG_ZSTD
_KNOWN_FLAGS = {1: _FLAG_ZLIB, 2: _FLAG_ZLIB, 3: _FLAG_ZLIB | _FLAG_ZDICT, 4: _FLAG_ZLIB | _FLAG_ZSTD,
                5: _FLAG_ZLIB | _FLAG_ZSTD}
# version 5: token ids below 2**24 stored in 3 bytes where version 4 took 4
TOKEN_WIDTH_3_VERSION = 5
# a trained zstd dictionary's size (a version 3 build's deflate dictionary is at most 32 KiB,
# deflate's window); measured on the realistic build: 64 KiB saves 0.3 B per fact over 32 KiB
MAX_DICTIONARY_BYTES = 64 * 1024
# rows sampled into the dictionary at most (the Spark job collects this many to the driver)
DICTIONARY_SAMPLE_ROWS = 4096
# bytes taken from the start of each sampled body: bounds what the driver trains on (the
# realistic build's bodies average 2.5 kB, so most are taken whole)
DICTIONARY_PIECE_BYTES = 8192
# zstd's level for rows (and the level the dictionary's entropy tables are tuned for): a
# writer's choice, the reader is the same for every level. Measured on the realistic 1M-fact
# build (bench/bench_row_codecs.py; docs/tree.md, "Row format"): level 13 stores 22.1 B per
# fact of rows at ~9 MB/s, 9 stores 22.5 at ~22 MB/s; version 3's deflate level 9 stored 22.8
# at 1.6 MB/s. Level 9 would halve the prefix rows stage's compression time (about a second
# of wall per 1M facts on 2 cores) for 0.35 B/fact, but the level fixes every stored row's
# bytes, and a build made faster must write the same rows (docs/tree.md, "Row format")
DICTIONARY_LEVEL = 13
# version 5: level 13's tables with zstd's btopt match finder, whose matches can be as short as
# one 3-byte token id (level 13's lazy finder needs 5 bytes). Measured on rows of generated facts
# (T=256, 54,960 facts, Qwen2.5, version 5 bodies, one core; docs/tree.md, "Version 5"): 13.00 ->
# 11.92 B/fact of bodies for 1.7x the compression CPU; btultra and levels 16-19 store within
# 0.1 of it for more CPU. A writer's choice: every level and strategy reads the same
ROW_STRATEGY = zstandard.STRATEGY_BTOPT
_ZSTD_FORMAT = zstandard.FORMAT_ZSTD1_MAGICLESS
# a trained dictionary starts with zstd's dictionary magic; raw content that would too is
# stored behind a zero byte, so a dictionary's bytes always say which kind they are
_ZSTD_DICTIONARY_MAGIC = b"\x37\xa4\x30\xec"
_COMPRESS_MIN_BYTES = 64
_MAX_TOKEN = 2**32 - 1
# Bounds a row must respect before it is trusted (encoders refuse to write past them, the
# decoder refuses to read past them): a corrupt or hostile row costs memory and time in
# proportion to its stored size (below). A row holds one expanded level (at most a
# vocabulary's worth of children) or a subtree of at most T facts; a fact has at most 4096
# tokens (tokenize.max_tokens).
MAX_FRAGMENT_NODES = 1 << 21
MAX_FRAGMENT_LEVELS = 4096
# Decoding costs memory per node (55-72 bytes at peak, measured: docs/tree.md), so a row
# may not claim more nodes than its stored size accounts for: at most
# max(NODES_ANY_ROW, NODES_PER_STORED_BYTE x stored bytes). A forged row that compresses
# two million identical nodes into 10 KB is refused before anything is allocated. Real rows
# stay far inside: an expanded row stores at least a byte per ~0.7 node (distinct sorted
# tokens), a complete row of the default B (32,768 tokens) has fewer nodes than NODES_ANY_ROW,
# and the encoder stores a row uncompressed rather than past the ratio (2+ bytes per node).
NODES_ANY_ROW = 1 << 16
NODES_PER_STORED_BYTE = 16
# An external node's stored leaf count: a build holds fewer facts than this, and a row's sums
# of at most MAX_FRAGMENT_NODES such counts stay far inside int64 (a forged count would
# otherwise wrap into a plausible wrong one)
MAX_FRAGMENT_LEAVES = 1 << 40


def max_nodes_for(stored_bytes: int) -> int:
    """The most nodes a row of ``stored_bytes`` bytes (header included) may hold."""
    return min(MAX_FRAGMENT_NODES, max(NODES_ANY_ROW, NODES_PER_STORED_BYTE * stored_bytes))


# --------------------------------------------------------------------------- dictionary


@dataclass(frozen=True)
class PresetDictionary:
    """A build's preset dictionary and its crc32, computed once: every dictionary-compressed
    row's checksum is seeded with it. A version 4 build's rows read it as a zstd dictionary
    (trained, or raw content: its bytes say which), a version 3 build's as deflate's ``zdict``.
    The zstd (de)compressors made from it are kept per thread: they are not thread-safe, and
    making one per row would double a small row's decode time."""

    data: bytes
    crc: int = field(init=False, repr=False, compare=False)
    # and, set below but not fields (dataclasses.asdict copies fields): ``_zstd``, the zstd
    # dictionary once loaded, and ``_local``, the per-thread (de)compressors

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes):
            object.__setattr__(self, "data", bytes(self.data))
        if not 0 < len(self.data) <= MAX_DICTIONARY_BYTES:
            raise FormatError(
                f"a preset dictionary of {len(self.data)} bytes; it holds 1 to {MAX_DICTIONARY_BYTES}"
            )
        object.__setattr__(self, "crc", zlib.crc32(self.data))
        object.__setattr__(self, "_zstd", None)
        object.__setattr__(self, "_local", threading.local())

    def __repr__(self) -> str:
        return f"PresetDictionary({len(self.data)} bytes, crc32 {self.crc:08x})"

    # immutable: a copy is itself, and a copy in another process is made again from the
    # bytes (zstd's objects do not cross processes)
    def __deepcopy__(self, memo: dict) -> "PresetDictionary":
        return self

    def __reduce__(self) -> tuple:
        return PresetDictionary, (self.data,)

    def _zstd_dictionary(self) -> "zstandard.ZstdCompressionDict":
        # its kind from its first bytes; a corrupt trained dictionary fails when a
        # (de)compressor is made from it, which the callers turn into a FormatError
        if self._zstd is None:
            object.__setattr__(self, "_zstd", zstandard.ZstdCompressionDict(self.data))
        return self._zstd

    def compressor(self) -> "zstandard.ZstdCompressor":
        """This thread's zstd compressor for rows (level ``DICTIONARY_LEVEL`` with ``ROW_STRATEGY``,
        magicless frames with their content size and no checksum: the row's crc32 guards them)."""
        found = getattr(self._local, "compressor", None)
        if found is None:
            params = zstandard.ZstdCompressionParameters.from_level(
                DICTIONARY_LEVEL, strategy=ROW_STRATEGY, format=_ZSTD_FORMAT, write_checksum=False,
                write_content_size=True, write_dict_id=False)
            found = zstandard.ZstdCompressor(dict_data=self._zstd_dictionary(), compression_params=params)
            self._local.compressor = found
        return found

    def decompressor(self) -> "zstandard.ZstdDecompressor":
        found = getattr(self._local, "decompressor", None)
        if found is None:
            found = zstandard.ZstdDecompressor(dict_data=self._zstd_dictionary(), format=_ZSTD_FORMAT)
            self._local.decompressor = found
        return found


def dictionary_sample_order(prefix: bytes) -> tuple[int, bytes]:
    """The order rows are sampled in for the dictionary: by crc32 of their key (a seeded
    shuffle that Spark SQL computes alike: ``crc32(prefix)``), then the key (ties)."""
    return zlib.crc32(prefix), prefix


def make_dictionary(rows: Iterable[tuple[bytes, bytes]]) -> PresetDictionary | None:
    """The preset dictionary of a build from ``(prefix, node)`` rows (any order; only the
    ``DICTIONARY_SAMPLE_ROWS`` first in :func:`dictionary_sample_order` are read, so a caller
    may pass just those): a zstd dictionary of at most ``MAX_DICTIONARY_BYTES`` trained on the
    first ``DICTIONARY_PIECE_BYTES`` of each sampled row's uncompressed body, in sample order.
    The same rows give the same bytes (zstd's trainer is deterministic with fixed parameters
    on one thread). Too few rows to train on (a handful): the pieces themselves, as a raw
    content dictionary. ``None`` when the rows hold no body at all."""
    sample = sorted(rows, key=lambda r: dictionary_sample_order(r[0]))[:DICTIONARY_SAMPLE_ROWS]
    pieces = [piece for piece in (_plain_body(node)[:DICTIONARY_PIECE_BYTES] for _, node in sample) if piece]
    if not pieces:
        return None
    try:
        # k and d: zstd's cover trainer's segment and d-mer sizes, fixed (its search over them
        # runs threads and is slower); measured on the realistic build as good as the search
        trained = zstandard.train_dictionary(MAX_DICTIONARY_BYTES, pieces, k=200, d=8,
                                             level=DICTIONARY_LEVEL, threads=0)
        return PresetDictionary(trained.as_bytes())
    except zstandard.ZstdError:  # too few or too small samples: zstd refuses to train
        data = b"".join(pieces)[: MAX_DICTIONARY_BYTES - 1]
        if data.startswith(_ZSTD_DICTIONARY_MAGIC):
            data = b"\0" + data
        return PresetDictionary(data)


def _plain_body(node: bytes) -> bytes:
    """The uncompressed body of a checksummed row written without a dictionary."""
    frag_version, flags = node[0], node[1]
    if frag_version < 2 or flags & _FLAGS_DICTIONARY:
        raise InputRefused("only a checksummed row without a dictionary is sampled")
    body = node[_HEADER.size:]
    return zlib.decompress(body) if flags & _FLAG_ZLIB else body


def with_dictionary(node: bytes, dictionary: PresetDictionary | None, *, compress: bool = True) -> bytes:
    """A row written without a dictionary, written again compressed by zstd against
    ``dictionary`` when that is smaller (else plain or zlib as it was). Its decoded
    content is unchanged; the Spark job encodes rows first and compresses them once the
    build's dictionary is known."""
    row_version, _flags, tw, cw, lw, _, n = _HEADER_V1.unpack_from(node)
    if row_version != FORMAT_VERSION:
        raise InputRefused(f"a version {row_version} row; only version {FORMAT_VERSION} rows are rewritten")
    return _frame(_plain_body(node), n, tw, cw, lw, compress, dictionary)


# --------------------------------------------------------------------------- prefixes


def encode_prefix(tokens: Sequence[int] | np.ndarray) -> bytes:
    """Key bytes of a prefix: big-endian uint32 per token (root: ``b""``), so byte order is
    token order. The one definition of the key; ``prefix_key_sql`` is the same in Spark SQL."""
    if isinstance(tokens, np.ndarray):
        if tokens.size and (tokens.min() < 0 or tokens.max() > _MAX_TOKEN):
            raise InputRefused("token ids must lie in [0, 2**32)")
        return tokens.astype(">u4").tobytes()
    try:  # struct beats numpy on the short prefixes of a walk
        return struct.pack(f">{len(tokens)}I", *tokens)
    except struct.error as exc:
        raise InputRefused(f"token ids must lie in [0, 2**32): {exc}") from exc


def prefix_key_sql(token_ids: str, length: int | str) -> str:
    """A Spark SQL expression for ``encode_prefix`` of the first ``length`` ids of the
    ``array<int>`` column ``token_ids`` (a string: the runtime imports no Spark)."""
    return (f"unhex(concat_ws('', transform(slice({token_ids}, 1, {length}), "
            "t -> lpad(hex(t), 8, '0'))))")


def decode_prefix(key: bytes) -> np.ndarray:
    if len(key) % 4:
        raise FormatError(f"prefix key of {len(key)} bytes is not a multiple of 4")
    return np.frombuffer(key, dtype=">u4").astype(np.int64)


# --------------------------------------------------------------------------- widths


def _width_for(max_value: int) -> int:
    if max_value < 2**8:
        return 1
    if max_value < 2**16:
        return 2
    if max_value < 2**32:
        return 4
    return 8


_DTYPES = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


def _as(arr: np.ndarray, width: int) -> bytes:
    return np.ascontiguousarray(arr, dtype=_DTYPES[width]).tobytes()


# --------------------------------------------------------------------------- encode


def encode_fragment(
    tokens: np.ndarray,
    child_count: np.ndarray,
    ends: np.ndarray,
    external: np.ndarray,
    ext_leaves: np.ndarray,
    *,
    compress: bool = True,
) -> bytes:
    """Encode a BFS fragment given as arrays (node 0 = the row's prefix).

    ``tokens`` has ``n - 1`` entries (nodes 1..n-1), the others ``n``;
    ``ext_leaves`` has one entry per external node, in node order.
    """
    child_count = np.asarray(child_count, dtype=np.int64)
    n = int(child_count.size)
    tokens = np.asarray(tokens, dtype=np.int64)
    ends = np.asarray(ends, dtype=bool)
    external = np.asarray(external, dtype=bool)
    ext_leaves = np.asarray(ext_leaves, dtype=np.int64)
    if n == 0 or tokens.size != n - 1 or ends.size != n or external.size != n:
        raise InputRefused("fragment arrays have inconsistent lengths")
    if n > MAX_FRAGMENT_NODES:
        raise InputRefused(f"a fragment of {n} nodes exceeds MAX_FRAGMENT_NODES ({MAX_FRAGMENT_NODES})")
    if int(child_count.sum()) != n - 1:
        raise InputRefused("child counts do not add up to the node count")
    if int(external.sum()) != ext_leaves.size:
        raise InputRefused("one ext_leaves entry is needed per external node")
    if ext_leaves.size and int(ext_leaves.max()) > MAX_FRAGMENT_LEAVES:
        raise InputRefused(f"an external node's leaf count exceeds MAX_FRAGMENT_LEAVES ({MAX_FRAGMENT_LEAVES})")
    tw = _width_for(int(tokens.max()) if tokens.size else 0)
    if tw == 8:
        raise InputRefused("token ids must lie in [0, 2**32)")
    cw = _width_for(int(child_count.max()))
    lw = _width_for(int(ext_leaves.max()) if ext_leaves.size else 0)
    body = b"".join(
        (
            _as(tokens, tw),
            _as(child_count, cw),
            np.packbits(ends).tobytes(),
            np.packbits(external).tobytes(),
            _as(ext_leaves, lw),
        )
    )
    return _frame(body, n, tw, cw, lw, compress)


def _frame(body: bytes, n: int, tw: int, cw: int, lw: int, compress: bool,
           dictionary: PresetDictionary | None = None) -> bytes:
    """Header, checksum and (when it pays) zlib, or zstd against the build's preset
    dictionary, around a fragment body. Token ids written 4 bytes wide that all lie below
    ``2**24`` are stored 3 bytes wide (version 5)."""
    if tw == 4 and n > 1:
        tokens = np.frombuffer(body, np.uint8, 4 * (n - 1)).reshape(n - 1, 4)
        if not tokens[:, 3].any():  # every id below 2**24
            body, tw = tokens[:, :3].tobytes() + body[4 * (n - 1):], 3
    flags = 0
    if compress and dictionary is not None and len(body) >= _DICTIONARY_MIN_BYTES:
        try:
            packed = dictionary.compressor().compress(body)
        except zstandard.ZstdError as exc:  # zstd digests the dictionary at the first row
            raise FormatError(f"the build's preset dictionary does not load: {exc}") from exc
        # compressed past what the decoder accepts for its node count (a huge, very repetitive
        # subtree): stored plain instead, which always fits (2+ bytes per node)
        if len(packed) < len(body) and n <= max_nodes_for(_HEADER.size + len(packed)):
            body, flags = packed, _FLAG_ZSTD
    elif compress and len(body) >= _COMPRESS_MIN_BYTES:
        packed = zlib.compress(body, 6)
        if len(packed) < len(body) and n <= max_nodes_for(_HEADER.size + len(packed)):
            body, flags = packed, _FLAG_ZLIB
    head = _HEADER_V1.pack(FORMAT_VERSION, flags, tw, cw, lw, 0, n)
    seed = zlib.crc32(head, dictionary.crc) if flags & _FLAG_ZSTD else zlib.crc32(head)
    return head + struct.pack("<I", zlib.crc32(body, seed)) + body


# with the dictionary even a short body shrinks (its common bytes are in the dictionary)
_DICTIONARY_MIN_BYTES = 16


def encode_children(
    child_tokens: Sequence[int] | np.ndarray,
    child_leaves: Sequence[int] | np.ndarray,
    ends: bool,
    *,
    compress: bool = True,
) -> bytes:
    """An expanded row: its children, all external, with their leaf counts."""
    toks = np.asarray(child_tokens, dtype=np.int64)
    leaves = np.asarray(child_leaves, dtype=np.int64)
    order = np.argsort(toks, kind="stable")
    toks, leaves = toks[order], leaves[order]
    if toks.size > 1 and np.any(toks[1:] == toks[:-1]):
        raise InputRefused("duplicate child token")
    if np.any(leaves < 1):
        raise InputRefused("every child must have at least one leaf")
    k = toks.size
    return encode_fragment(
        tokens=toks,
        child_count=np.concatenate(([k], np.zeros(k, dtype=np.int64))),
        ends=np.concatenate(([bool(ends)], np.zeros(k, dtype=bool))),
        external=np.concatenate(([False], np.ones(k, dtype=bool))),
        ext_leaves=leaves,
        compress=compress,
    )


def encode_subtree(suffixes: Iterable[Sequence[int]], *, compress: bool = True) -> bytes:
    """A complete row: the trie of every suffix below the row's prefix.

    ``suffixes`` are the facts' remaining tokens after the prefix (an empty one
    means the prefix itself is a fact). Duplicates are allowed and collapse.
    """
    seqs = [np.asarray(s, dtype=np.int64) for s in suffixes]
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([s.size for s in seqs], out=offsets[1:])
    values = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    return encode_subtree_flat(values, offsets, compress=compress)


def encode_subtree_flat(
    values: np.ndarray, offsets: np.ndarray, *, compress: bool = True
) -> bytes:
    """``encode_subtree`` over suffixes given Arrow-style: ``values[offsets[i]:offsets[i+1]]``.

    Vectorized: pad into a matrix (``-1`` past each end; no per-suffix Python objects,
    which is what the Spark encoder feeds it from an Arrow list column), sort it, then
    derive each BFS level from the longest common prefix of neighbouring rows.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    return encode_subtree_ranges(values, offsets[:-1], offsets[1:], compress=compress)


def encode_subtree_ranges(
    values: np.ndarray, starts: np.ndarray, stops: np.ndarray, *, compress: bool = True
) -> bytes:
    """``encode_subtree`` over suffixes ``values[starts[i]:stops[i]]`` (ranges need not touch:
    the prefix rows job passes each fact's tokens after the row's prefix)."""
    values = np.asarray(values)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(stops, dtype=np.int64) - starts
    width = int(lengths.max()) if lengths.size else 0
    mat = np.full((lengths.size, width), -1, dtype=np.int64)
    if width:
        cols = np.arange(width)
        mask = cols[None, :] < lengths[:, None]
        mat[mask] = values[(starts[:, None] + cols[None, :])[mask]]
    return _encode_suffix_matrix(mat, lengths, compress)


def encode_subtree_runs(
    mat: np.ndarray,
    lengths: np.ndarray,
    lcp: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    depth: np.ndarray,
    *,
    compress: bool = True,
) -> list[bytes]:
    """``encode_subtree`` of many rows in one vectorized pass (the prefix rows job's hot path).

    ``mat`` holds sorted, distinct facts padded with -1 (``lengths`` their token counts,
    ``lcp[i]`` the common prefix length of facts ``i - 1`` and ``i``); row ``r`` is the
    subtree of facts ``lo[r]..hi[r]-1`` below their first ``depth[r]`` tokens. The bytes
    equal ``encode_subtree`` of each row's suffixes: a node is a (fact, column) where a
    fact leaves its predecessor's path; nodes sort by (row, column, fact) into each row's
    BFS order, and a node's parent is the last node at or above it one column left.
    """
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    depth = np.asarray(depth, dtype=np.int64)
    rows = lo.size
    if rows == 0:
        return []
    counts = hi - lo
    if np.any(counts < 1):
        raise InputRefused("a subtree needs at least one fact")
    facts = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
    row = np.repeat(np.arange(rows), counts)
    first = np.zeros(facts.size, dtype=bool)
    first[np.cumsum(counts) - counts] = True
    n = np.asarray(lengths, dtype=np.int64)[facts]
    k = depth[row]
    width = int(n.max())
    cols = np.arange(width)
    new = (cols >= k[:, None]) & (cols < n[:, None]) & (first[:, None] | (lcp[facts][:, None] <= cols))
    fi, j = np.nonzero(new)  # fact-major
    order = np.argsort(row[fi] * width + j, kind="stable")  # (row, column, fact)
    fi, j = fi[order], j[order]
    ids = np.full(new.shape, -1, dtype=np.int64)
    ids[fi, j] = np.arange(fi.size)
    owner = np.maximum.accumulate(ids, axis=0)  # the node each (fact, column) lies on
    node_row = row[fi]
    top = j == k[fi]  # children of the row's own node
    parent = owner[fi[~top], j[~top] - 1]
    child_count = np.bincount(parent, minlength=fi.size)
    root_count = np.bincount(node_row[top], minlength=rows)
    tokens = mat[facts[fi], j].astype(np.int64)
    ends = n[fi] == j + 1
    root_ends = np.asarray(lengths, dtype=np.int64)[lo] == depth
    if tokens.size and int(tokens.max()) > _MAX_TOKEN:
        raise InputRefused("token ids must lie in [0, 2**32)")
    bounds = np.searchsorted(node_row, np.arange(rows + 1))
    # field widths per row, as encode_fragment picks them (a row's nodes: its own + [a, b))
    # (reduceat over the rows that have nodes: their node ranges tile the arrays)
    top_token = np.zeros(rows, dtype=np.int64)
    top_count = root_count.astype(np.int64)
    filled = np.flatnonzero(bounds[1:] > bounds[:-1])
    if filled.size:
        top_token[filled] = np.maximum.reduceat(tokens, bounds[filled])
        top_count[filled] = np.maximum(top_count[filled], np.maximum.reduceat(child_count, bounds[filled]))
    out = []
    for r in range(rows):
        a, b = int(bounds[r]), int(bounds[r + 1])
        nodes = b - a + 1
        if nodes > MAX_FRAGMENT_NODES:
            raise InputRefused(f"a fragment of {nodes} nodes exceeds MAX_FRAGMENT_NODES ({MAX_FRAGMENT_NODES})")
        tw, cw = _width_for(int(top_token[r])), _width_for(int(top_count[r]))
        body = b"".join((
            tokens[a:b].astype(_DTYPES[tw]).tobytes(),
            np.concatenate(([root_count[r]], child_count[a:b])).astype(_DTYPES[cw]).tobytes(),
            np.packbits(np.concatenate(([root_ends[r]], ends[a:b]))).tobytes(),
            bytes((nodes + 7) // 8),  # no external node
        ))
        out.append(_frame(body, nodes, tw, cw, 1, compress))
    return out


def encode_packed(
    suffixes: Iterable[Sequence[int]],
    child_tokens: Sequence[int] | np.ndarray,
    child_leaves: Sequence[int] | np.ndarray,
    *,
    compress: bool = True,
) -> bytes:
    """A packed row: an expanded prefix whose small children are stored whole in its own row
    (``suffixes``: their facts' tokens after the prefix, an empty one when the prefix itself
    is a fact) beside its other children, external (``child_tokens``, ``child_leaves``).

    The same fragment as ever (any node of a row may be external); only the cut differs from
    an expanded row's, whose children are all external."""
    seqs = [np.asarray(x, dtype=np.int64) for x in suffixes]
    stops = np.cumsum([x.size for x in seqs], dtype=np.int64)
    values = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    return encode_packed_ranges(values, stops - np.array([x.size for x in seqs], dtype=np.int64), stops,
                                child_tokens, child_leaves, compress=compress)


def encode_packed_ranges(
    values: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    child_tokens: Sequence[int] | np.ndarray,
    child_leaves: Sequence[int] | np.ndarray,
    *,
    compress: bool = True,
) -> bytes:
    """``encode_packed`` over suffixes ``values[starts[i]:stops[i]]`` (the prefix rows job's
    path: no per-suffix Python objects)."""
    values = np.asarray(values, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    toks = np.asarray(child_tokens, dtype=np.int64)
    leaves = np.asarray(child_leaves, dtype=np.int64)
    if toks.size != leaves.size:
        raise InputRefused("one leaf count is needed per external child")
    if np.any(leaves < 1):
        raise InputRefused("every child must have at least one leaf")
    # an external child is a one-token suffix, marked external once the trie is built
    lengths = np.concatenate((np.asarray(stops, dtype=np.int64) - starts, np.ones(toks.size, dtype=np.int64)))
    width = int(lengths.max()) if lengths.size else 0
    mat = np.full((lengths.size, width), -1, dtype=np.int64)
    inline = starts.size
    if width:
        cols = np.arange(width)
        mask = cols[None, :] < lengths[:inline, None]
        mat[:inline][mask] = values[(starts[:, None] + cols[None, :])[mask]]
        mat[inline:, 0] = toks
    firsts = mat[:inline, 0]
    if np.isin(toks, firsts[firsts >= 0]).any() or np.unique(toks).size != toks.size:
        raise InputRefused("a child is either stored whole or external, and once")
    return _encode_suffix_matrix(mat, lengths, compress, external=dict(zip(toks.tolist(), leaves.tolist())))


def _encode_suffix_matrix(mat: np.ndarray, lengths: np.ndarray, compress: bool,
                          external: dict[int, int] | None = None) -> bytes:
    """The trie of the rows of ``mat``; ``external``: token -> leaf count of the root's
    children that are external (each given as a one-token row)."""
    if mat.shape[0] == 0:
        raise InputRefused("a subtree needs at least one fact")
    if mat.size and (mat.max() > _MAX_TOKEN):
        raise InputRefused("token ids must lie in [0, 2**32)")
    # lexicographic sort; -1 padding sorts a fact before its extensions
    order = np.lexsort(mat.T[::-1]) if mat.shape[1] else np.arange(mat.shape[0])
    mat, lengths = mat[order], lengths[order]
    rows, width = mat.shape
    # lcp[r] = common prefix length of rows r-1 and r (0 for r = 0)
    if rows > 1 and width:
        differs = mat[1:] != mat[:-1]
        first_diff = np.where(differs.any(axis=1), differs.argmax(axis=1), width)
        lcp = np.concatenate(([0], first_diff))
    else:
        lcp = np.zeros(rows, dtype=np.int64)
    root_ends = bool((lengths == 0).any())
    level_tokens: list[np.ndarray] = []
    level_counts: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]  # root's count set below
    level_ends: list[np.ndarray] = [np.array([root_ends])]
    prev_starts = np.zeros(1, dtype=np.int64)  # root spans all rows
    for depth in range(width):
        new = (lengths > depth) & ((lcp <= depth) | (np.arange(rows) == 0))
        starts = np.flatnonzero(new)
        if starts.size == 0:
            break
        parent = np.searchsorted(prev_starts, starts, side="right") - 1
        level_counts[-1] = np.bincount(parent, minlength=prev_starts.size)
        level_tokens.append(mat[starts, depth])
        level_ends.append(lengths[starts] == depth + 1)
        level_counts.append(np.zeros(starts.size, dtype=np.int64))
        prev_starts = starts
    tokens = np.concatenate(level_tokens) if level_tokens else np.zeros(0, np.int64)
    n = tokens.size + 1
    ends = np.concatenate(level_ends)
    is_external = np.zeros(n, dtype=bool)
    ext_leaves = np.zeros(0, dtype=np.int64)
    if external:
        top = level_tokens[0]  # the root's children: nodes 1..len(top)
        is_external[1 : 1 + top.size] = np.isin(top, np.fromiter(external, np.int64, len(external)))
        ends[is_external] = False
        ext_leaves = np.array([external[int(t)] for t in top[is_external[1 : 1 + top.size]].tolist()],
                              dtype=np.int64)
    return encode_fragment(
        tokens=tokens,
        child_count=np.concatenate(level_counts),
        ends=ends,
        external=is_external,
        ext_leaves=ext_leaves,
        compress=compress,
    )


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class Fragment:
    """A decoded row. Arrays are indexed by node (0 = the row's own prefix)."""

    tokens: np.ndarray  # int64[n]; tokens[0] is unused (-1)
    # int32: at most MAX_FRAGMENT_NODES. 26 bytes a node where int64 would take 34, so a cache
    # of a given size holds about 30% more rows, and a row decoded for the first time touches
    # (page faults in) a quarter less fresh memory (docs/runtime.md, "A decoded row's memory")
    child_start: np.ndarray  # int32[n]
    child_count: np.ndarray  # int32[n]
    ends: np.ndarray  # bool[n]
    external: np.ndarray  # bool[n]
    leaves: np.ndarray  # int64[n]

    @property
    def n_nodes(self) -> int:
        return int(self.child_count.size)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.tokens, self.child_start, self.child_count,
                                      self.ends, self.external, self.leaves))

    def children(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokens (sorted) and leaf counts of the children of ``node``."""
        s = int(self.child_start[node])
        e = s + int(self.child_count[node])
        return self.tokens[s:e], self.leaves[s:e]

    def child(self, node: int, token: int) -> int:
        """Index of the child of ``node`` reached by ``token``, or -1."""
        s = int(self.child_start[node])
        e = s + int(self.child_count[node])
        i = s + int(np.searchsorted(self.tokens[s:e], token))
        if i < e and self.tokens[i] == token:
            return i
        return -1


def decode_fragment(data: bytes | memoryview, version: int | None = None,
                    dictionary: PresetDictionary | None = None) -> Fragment:
    """Decode a stored row. ``version``: the format version of the build it belongs to; a row
    of any other version is refused (a version 1 row, which has no checksum, must not slip
    into a version 2 build). ``None`` accepts every readable version. ``dictionary``: the
    build's preset dictionary (versions 3 and 4); a row compressed against one is refused
    without it, and fails its checksum with another build's."""
    data = bytes(data)
    if len(data) < _HEADER_V1.size:
        raise FormatError("fragment shorter than its header")
    row_version, flags, tw, cw, lw, _, n = _HEADER_V1.unpack_from(data)
    if row_version not in READABLE_VERSIONS:
        raise FormatError(f"fragment format version {row_version}; this runtime reads {READABLE_VERSIONS}")
    if version is not None and row_version != version:
        raise FormatError(
            f"a format version {row_version} row inside a format version {version} build: "
            "the row is corrupt or forged"
        )
    version = row_version
    if flags & ~_KNOWN_FLAGS[version]:
        raise FormatError(f"fragment flags {flags:#x} are not those of a version {version} row")
    if flags & _FLAG_ZLIB and flags & _FLAGS_DICTIONARY:
        raise FormatError("fragment flags claim both zlib and the preset dictionary")
    if flags & _FLAGS_DICTIONARY and dictionary is None:
        raise FormatError(
            "a row compressed with its build's preset dictionary, read without one: the "
            "build's dictionary is missing from its catalog or file"
        )
    header_size = _HEADER_V1.size
    if version >= 2:
        if len(data) < _HEADER.size:
            raise FormatError("fragment shorter than its header")
        (stored_crc,) = struct.unpack_from("<I", data, _HEADER_V1.size)
        header_size = _HEADER.size
        seed = (zlib.crc32(data[: _HEADER_V1.size], dictionary.crc) if flags & _FLAGS_DICTIONARY
                else zlib.crc32(data[: _HEADER_V1.size]))
        if zlib.crc32(data[header_size:], seed) != stored_crc:
            raise FormatError(
                "fragment checksum mismatch: the stored row is corrupt"
                + (", or read with another build's preset dictionary" if flags & _FLAGS_DICTIONARY else "")
            )
    if ((tw not in _DTYPES and not (tw == 3 and version >= TOKEN_WIDTH_3_VERSION))
            or cw not in _DTYPES or lw not in _DTYPES or n < 1):
        raise FormatError("fragment header is corrupt")
    if n > MAX_FRAGMENT_NODES:
        raise FormatError(f"fragment header claims {n} nodes; at most {MAX_FRAGMENT_NODES} are read")
    if n > max_nodes_for(len(data)):
        raise FormatError(
            f"fragment header claims {n} nodes in {len(data)} stored bytes; at most "
            f"{max_nodes_for(len(data))} are read from a row of that size"
        )
    nb = (n + 7) // 8
    # the largest body the header allows (every node external): nothing bigger is inflated
    most = tw * (n - 1) + cw * n + 2 * nb + lw * n
    body = data[header_size:]
    if flags & _FLAG_ZSTD:
        body = _unzstd(body, most, dictionary)
    elif flags & (_FLAG_ZLIB | _FLAG_ZDICT):
        try:
            inflater = (zlib.decompressobj(-15, dictionary.data) if flags & _FLAG_ZDICT
                        else zlib.decompressobj())
            body = inflater.decompress(body, most + 1)
        except zlib.error as exc:
            raise FormatError(f"fragment body does not decompress: {exc}") from exc
        if len(body) > most or inflater.unconsumed_tail or not inflater.eof:
            raise FormatError("fragment body inflates past what its header allows, or is cut short")
    elif len(body) > most:
        raise FormatError("fragment body is longer than its header allows")
    return DECODERS[DECODER](body, tw, cw, lw, n)


# The checks of an inflated body, in the order both decoders make them (``_fragment.c``
# returns the code of the first that fails: its key in ``_BODY_ERRORS``)
_TRUNCATED = "fragment body is truncated"
_LENGTH_MISMATCH = "fragment body length does not match its header"
_COUNTS_INCONSISTENT = "fragment child counts are inconsistent"
_NODE_BEFORE_PARENT = "fragment child counts put a node before its parent"
_SIBLINGS_UNSORTED = "fragment has duplicate or unsorted sibling tokens"
_LEAVES_OUT_OF_RANGE = "fragment has a leaf count out of range"
_TOO_DEEP = f"fragment is deeper than {MAX_FRAGMENT_LEVELS} levels"
_NO_FACT_BELOW = "fragment has a node with no fact below it"


def _decode_body_numpy(body: bytes, tw: int, cw: int, lw: int, n: int) -> Fragment:
    """The numpy decoder of an inflated body: a handful of whole-array calls per check."""
    nb = (n + 7) // 8
    sizes = [tw * (n - 1), cw * n, nb, nb]
    offs = np.cumsum([0] + sizes)
    if len(body) < offs[-1]:
        raise FormatError(_TRUNCATED)
    tokens = np.empty(n, dtype=np.int64)
    tokens[0] = -1
    if tw == 3:  # version 5: little-endian 3-byte ids
        packed = np.frombuffer(body, np.uint8, 3 * (n - 1), offs[0]).reshape(n - 1, 3).astype(np.int64)
        tokens[1:] = packed[:, 0] | (packed[:, 1] << 8) | (packed[:, 2] << 16)
    else:
        tokens[1:] = np.frombuffer(body, _DTYPES[tw], n - 1, offs[0])
    child_count = np.frombuffer(body, _DTYPES[cw], n, offs[1]).astype(np.int64)
    ends = np.unpackbits(np.frombuffer(body, np.uint8, nb, offs[2]), count=n).astype(bool)
    external = np.unpackbits(np.frombuffer(body, np.uint8, nb, offs[3]), count=n).astype(bool)
    n_ext = int(external.sum())
    if len(body) != offs[-1] + lw * n_ext:
        raise FormatError(_LENGTH_MISMATCH)
    ext_leaves = np.frombuffer(body, _DTYPES[lw], n_ext, offs[4]).astype(np.int64)
    # a count past n - 1 (or one that wrapped negative from uint64) is inconsistent on its own
    if (np.any((child_count < 0) | (child_count > n - 1)) or int(child_count.sum()) != n - 1
            or np.any(child_count[external] != 0)):
        raise FormatError(_COUNTS_INCONSISTENT)
    # counts and starts are at most n <= MAX_FRAGMENT_NODES once the counts are consistent
    child_count = child_count.astype(np.int32)
    child_start = np.empty(n, dtype=np.int32)
    child_start[0] = 1
    np.cumsum(child_count[:-1], out=child_start[1:])
    child_start[1:] += 1
    leaves = ends.astype(np.int64)
    leaves[external] += ext_leaves
    parent = np.repeat(np.arange(n), child_count)  # parent of nodes 1..n-1
    # BFS order: a node's parent comes before it (else the counts make a cycle), and siblings
    # are strictly increasing (a lookup's binary search needs it; a duplicate child would
    # count its facts twice)
    if n > 1:
        if np.any(parent >= np.arange(1, n)):
            raise FormatError(_NODE_BEFORE_PARENT)
        siblings = parent[1:] == parent[:-1]
        if np.any(siblings & (tokens[2:] <= tokens[1:-1])):
            raise FormatError(_SIBLINGS_UNSORTED)
    if n_ext and np.any((ext_leaves < 0) | (ext_leaves > MAX_FRAGMENT_LEAVES)):
        raise FormatError(_LEAVES_OUT_OF_RANGE)
    # a small row cannot be deeper than MAX_FRAGMENT_LEVELS: it has fewer nodes
    leaves = (_plain_subtree_sums(leaves, parent) if n <= _SMALL_FRAGMENT_NODES
              else _subtree_sums(leaves, child_start, n))
    if np.any(leaves < 1):
        raise FormatError(_NO_FACT_BELOW)
    return Fragment(tokens, child_start, child_count, ends, external, leaves)


_BODY_ERRORS = {
    1: _TRUNCATED,
    2: _LENGTH_MISMATCH,
    3: _COUNTS_INCONSISTENT,
    4: _NODE_BEFORE_PARENT,
    5: _SIBLINGS_UNSORTED,
    6: _TOO_DEEP,
    7: _NO_FACT_BELOW,
    8: _LEAVES_OUT_OF_RANGE,
}


def _decode_body_compiled(body: bytes, tw: int, cw: int, lw: int, n: int) -> Fragment:
    """The compiled decoder (``_fragment.c``): the same checks in the same order, in a few
    linear passes; it fills arrays allocated here."""
    tokens, leaves = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    child_start, child_count = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    ends, external = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
    code = _fragment.decode_body(body, tw, cw, lw, n, MAX_FRAGMENT_LEVELS, MAX_FRAGMENT_LEAVES, tokens,
                                 child_start, child_count, ends, external, leaves)
    if code:
        raise FormatError(_BODY_ERRORS[code])
    return Fragment(tokens, child_start, child_count, ends, external, leaves)


# The decoders this runtime has, by name (the compiled one only where it was built)
DECODERS = {"numpy": _decode_body_numpy}
if _fragment is not None:
    DECODERS["compiled"] = _decode_body_compiled
# Which decoder ``decode_fragment`` uses: the compiled one where the runtime was installed with
# it (a C compiler at install time), else numpy; both accept and refuse the same rows and fill
# the same arrays (tests/runtime/test_format.py compares them). REFACTX_DECODER=numpy in the
# environment, or assigning this, picks numpy (bench/bench_decode.py times both).
DECODER = os.environ.get("REFACTX_DECODER") or ("compiled" if _fragment is not None else "numpy")
if DECODER not in DECODERS:
    raise ImportError(f"REFACTX_DECODER={DECODER!r}: this runtime has the decoders {sorted(DECODERS)}")


def _unzstd(body: bytes, most: int, dictionary: PresetDictionary) -> bytes:
    """A version 4 body, inflated by zstd against the build's dictionary; never more than
    ``most`` bytes: the frame's content size is read and bounded before anything is
    allocated, and the frame must end where the row does."""
    try:
        size = zstandard.get_frame_parameters(body, format=_ZSTD_FORMAT).content_size
        if size > most:  # CONTENTSIZE_UNKNOWN and _ERROR are larger still
            raise FormatError("fragment body inflates past what its header allows")
        return dictionary.decompressor().decompress(body, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise FormatError(f"fragment body does not decompress: {exc}") from exc


_SMALL_FRAGMENT_NODES = 96  # measured: the plain pass wins below ~100 nodes


def _plain_subtree_sums(own: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Every node's ``own`` count plus its descendants', in one plain pass from the last node
    back (BFS puts children after their parent; ``parent`` of nodes 1..n-1): cheaper than a
    few numpy calls on a row of a hundred nodes."""
    counts, parents = own.tolist(), parent.tolist()
    for i in range(len(counts) - 1, 0, -1):
        counts[parents[i - 1]] += counts[i]
    return np.array(counts, dtype=np.int64)


def _subtree_sums(own: np.ndarray, child_start: np.ndarray, n: int) -> np.ndarray:
    """Every node's ``own`` count plus those of all its descendants, by pointer doubling:
    about log2(depth) rounds of whole-array numpy calls, where a pass per BFS level costs
    ~70 rounds of small calls on the deep rows that a walk's slow steps decode.

    In BFS order the descendants of node ``i`` at distance ``d`` are the contiguous nodes
    ``[g_d(i), g_d(i + 1))``, where ``g_d`` applies ``d`` times the map ``f`` from a node
    boundary to its children's boundary (``f(i) = child_start[i]``, ``f(n) = n``). With ``E``
    the running sum of ``own``, node ``i``'s total is ``sum_d E[g_d(i + 1)] - E[g_d(i)]``;
    ``S_m = sum_{d<m} E o g_d`` doubles as ``S_2m = S_m + S_m o g_m`` and ``g_2m = g_m o g_m``.
    Terms past the deepest level are ``E[n]`` on both sides and cancel. The caller has
    checked that every node comes after its parent, so ``f(i) > i`` and the rounds end."""
    g = np.empty(n + 1, dtype=np.int64)
    g[:n] = child_start
    g[n] = n
    sums = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(own, out=sums[1:])
    levels = 1  # g holds g_levels
    while g[0] != n:  # some node lies at depth ``levels``
        if levels > MAX_FRAGMENT_LEVELS:
            raise FormatError(_TOO_DEEP)
        sums += sums[g]
        g = g[g]
        levels *= 2
    return np.diff(sums)


def iter_suffixes(frag: Fragment, node: int = 0) -> Iterable[tuple[tuple[int, ...], bool]]:
    """Every path from ``node`` to a fact end or an external node: (tokens, is_external).

    For tests and validation tools; not used on the lookup path.
    """
    stack: list[tuple[int, tuple[int, ...]]] = [(node, ())]
    while stack:
        i, path = stack.pop()
        if frag.ends[i]:
            yield path, False
        if frag.external[i]:
            yield path, True
            continue
        s = int(frag.child_start[i])
        for j in range(s + int(frag.child_count[i]) - 1, s - 1, -1):
            stack.append((j, path + (int(frag.tokens[j]),)))
