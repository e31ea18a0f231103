"""Where a stored fact comes from: its fact id and the sources it was verbalized from.

The pipeline's verbalize stage packs the sources of a build's facts into blocks, one per
fact-id range (:func:`encode_block`), and the load stage stores them beside the tree, in the
build's partition ``provenance_b<build_id>`` (docs/provenance.md); builds stored as one text
row per source (layout ``rows``) are read as well. A fact is found by its ``fact_id``, which
verbalize computes as Spark's ``xxhash64(text)``. The runtime computes the same id from the text with
:func:`fact_id` (XXH64, seed 42, over the text's UTF-8 bytes, as Spark's ``XXH64`` does),
so the table needs no copy of the text (8 bytes a row instead of ~60) and its key is the
id the rest of the pipeline already uses. ``tests/pipeline/test_provenance.py`` checks it against
Spark on every fact of a build and on texts of every length class and script.

Only stored facts are looked up: verbalize drops a fact whose id collides with another
fact's, so a stored text's id names that fact alone.
"""

from __future__ import annotations

import re
import struct
import threading
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import zstandard

from ..errors import FormatError, InputRefused

# the kinds of source a fact has (verbalize/provenance ``kind``)
KINDS = ("statement", "inverse", "description", "short_description")

# Spark's xxhash64 seed (org.apache.spark.sql.catalyst.expressions.XxHash64)
SPARK_XXHASH64_SEED = 42

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _merge(acc: int, val: int) -> int:
    return ((acc ^ _round(0, val)) * _P1 + _P4) & _MASK


def xxhash64(data: bytes, seed: int = SPARK_XXHASH64_SEED) -> int:
    """XXH64 of ``data`` as a signed 64-bit integer (Spark's ``LongType``)."""
    n = len(data)
    seed &= _MASK
    pos = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed
        v4 = (seed - _P1) & _MASK
        while pos + 32 <= n:
            v1 = _round(v1, int.from_bytes(data[pos:pos + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[pos + 8:pos + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[pos + 16:pos + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[pos + 24:pos + 32], "little"))
            pos += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while pos + 8 <= n:
        h ^= _round(0, int.from_bytes(data[pos:pos + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        pos += 8
    if pos + 4 <= n:
        h ^= (int.from_bytes(data[pos:pos + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        pos += 4
    while pos < n:
        h ^= (data[pos] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        pos += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    h ^= h >> 32
    return h - (1 << 64) if h >> 63 else h


def fact_id(text: str) -> int:
    """The id verbalize gives the fact ``text`` (``<s> <p> <o> .``, without the tree's
    ``fact_prefix``/``fact_suffix``)."""
    return xxhash64(text.encode("utf-8"))


@dataclass(frozen=True)
class Source:
    """One source of a fact. ``subject``, ``property`` and ``object`` are the source
    statement's ids (Wikidata ``Q42``/``P31``, or a graph's own entity and predicate ids);
    an inverse fact (``kind="inverse"``) states that statement read from object to subject.
    ``value`` is a literal object's lexical value as read (``+1952-03-11T00:00:00Z``), or a
    description's text; ``object`` and ``value`` are never both set."""

    kind: str
    subject: str
    property: str | None = None
    object: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class Provenance:
    """A fact's id and its sources (several when different statements read the same)."""

    fact_id: int
    sources: tuple[Source, ...]


def group_sources(ids: Sequence[int], rows: Iterable[Sequence[Any]]) -> list[Provenance]:
    """One :class:`Provenance` per id of ``ids`` from provenance rows ``(fact_id, kind,
    subject, property, object, value)``, sources in a stable order."""
    by_id: dict[int, list[Source]] = {}
    for fid, kind, subject, prop, obj, value in rows:
        by_id.setdefault(int(fid), []).append(Source(kind, subject, prop, obj, value))
    order = {k: i for i, k in enumerate(KINDS)}
    return [
        Provenance(i, tuple(sorted(by_id.get(i, ()), key=lambda s: (order.get(s.kind, len(order)), s.subject,
                                                                     s.property or "", s.object or "",
                                                                     s.value or ""))))
        for i in ids
    ]


# ---------------------------------------------------------------- the block layout
#
# A build's provenance in layout ``blocks`` (docs/provenance.md, "Packed by verbalize"): the
# sources of the facts whose ids share their top ``bits`` bits are one block, keyed by those
# bits as a signed integer (``fact_id >> (64 - bits)``), so the blocks of a reply's facts are
# one ``block = ANY(...)`` query. A block is a 20-byte header and one zstd frame of columns.
# Every column is stored at the narrowest of 1, 2, 4 or 8 bytes that holds it, its bytes
# transposed (all first bytes, then all second bytes ...) so that zstd sees the mostly-zero
# high bytes of small numbers as long runs.

# how a build stores its provenance (builds.provenance_layout): one text row per source, or
# packed blocks by fact-id range
LAYOUT_ROWS = "rows"
LAYOUT_BLOCKS = "blocks"

# the fewest facts a block holds on average (fewer than twice as many): columns that long
# compress to near their information, and a block's fixed costs (a tuple, a key, a header,
# its TOAST chunks' headers) are well under a byte a fact
FACTS_PER_BLOCK = 512
MAX_BLOCK_BITS = 48
BLOCK_MAGIC = b"RXPB"
BLOCK_VERSION = 1
_BLOCK_HEAD = struct.Struct("<4sBBHIII")  # magic, version, bits, reserved, facts, sources, crc32
# zstd's level for blocks (docs/provenance.md, "What it costs": level 15 against 9)
BLOCK_ZSTD_LEVEL = 15

# An id is a code and a number: a Wikidata id (``Q42``, ``P31``: one capital letter, then a
# number without leading zero) is the letter's code 1-26 (A=1 ... Z=26) and its number; any
# other id (a graph's own ``acme``) is CODE_STRING with its text in the block's strings.
CODE_NULL = 0
CODE_STRING = 27
# what matches is a Wikidata id; Spark tests the same pattern (``\z``: the end of the text,
# where Java's ``$`` would also match before a final newline)
WIKIDATA_ID_PATTERN = r"^[A-Z][1-9][0-9]{0,17}\z"
_WIKIDATA_ID = re.compile(r"[A-Z][1-9][0-9]{0,17}")
# A value is null; VALUE_IN_TEXT: the fact's text ends with ``> <value> .`` and the value holds
# no ``> <``, so it is what follows the text's last ``> <`` (stored as nothing); VALUE_STRING:
# its text in the block's strings; VALUE_IN_TEXT_SIZED: the text ends with ``<value> .`` (the
# value holds a ``> <``), stored as its length in code points.
VALUE_NULL = 0
VALUE_IN_TEXT = 1
VALUE_STRING = 2
VALUE_IN_TEXT_SIZED = 3
SEPARATOR = "> <"  # between a fact's parts (``<s> <p> <o> .``)
END = "> ."
# per id field, the letter most of its ids have: their code is not stored
_USUAL_LETTER = (ord("Q") - 64, ord("P") - 64, ord("Q") - 64)
# an id's class in the block's shape column
_NULL, _USUAL, _LETTER, _STRING = 0, 1, 2, 3
# where the shape keeps a source's kind, value code and its three ids' classes (2 bits each)
_SHAPE_SHIFTS = np.array([0, 2, 4, 6, 8], dtype=np.int64)


def block_bits(facts: int) -> int:
    """The top fact-id bits that key a block, for a build of ``facts`` facts: blocks of
    FACTS_PER_BLOCK to twice as many facts on average (fact ids are hashes, so the ranges fill
    evenly)."""
    if facts < 2 * FACTS_PER_BLOCK:
        return 0
    return min(MAX_BLOCK_BITS, int(facts // FACTS_PER_BLOCK).bit_length() - 1)


def block_of(fact_id_: int, bits: int) -> int:
    """The key of the block that holds ``fact_id_`` (a signed 64-bit id)."""
    return fact_id_ >> (64 - bits) if bits else 0


def block_keys(bits: int) -> range:
    """Every block key of a build with ``bits`` (the loader stores a block for each, empty ones
    too, so that a block that is not found is damage, never an empty range)."""
    return range(-(1 << (bits - 1)), 1 << (bits - 1)) if bits else range(1)


def split_id(value: str | None) -> tuple[int, int, str | None]:
    """``(code, number, text)`` of an id as a block stores it (``Q42`` -> ``(17, 42, None)``)."""
    if value is None:
        return CODE_NULL, 0, None
    if _WIKIDATA_ID.fullmatch(value):
        return ord(value[0]) - 64, int(value[1:]), None
    return CODE_STRING, 0, value


def _column(values: np.ndarray) -> bytes:
    """A column: its width (1, 2, 4 or 8 bytes) and its bytes transposed."""
    values = np.asarray(values, dtype=np.uint64)
    top = int(values.max()) if len(values) else 0
    width = 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4 if top < 1 << 32 else 8
    planes = values.astype(f"<u{width}").view(np.uint8).reshape(-1, width).T
    return bytes([width]) + planes.tobytes()


class _Columns:
    """A block's columns, read in order; a read past the block's end is a FormatError."""

    def __init__(self, body: bytes, where: str) -> None:
        self.body, self.raw, self.pos, self.where = body, np.frombuffer(body, dtype=np.uint8), 0, where

    def _start(self, n: int) -> tuple[int, int]:
        """(width, where its bytes start) of the next column of ``n`` values; skips it."""
        if self.pos >= len(self.body):
            raise FormatError(f"{self.where}: truncated (a column runs past the block's end)")
        width = self.body[self.pos]
        if width not in (1, 2, 4, 8):
            raise FormatError(f"{self.where}: a column of width {width}")
        start, self.pos = self.pos + 1, self.pos + 1 + n * width
        if self.pos > len(self.body):
            raise FormatError(f"{self.where}: truncated (a column runs past the block's end)")
        return width, start

    def whole(self, n: int) -> np.ndarray:
        """The next column, all ``n`` values (uint64)."""
        width, start = self._start(n)
        planes = self.raw[start:start + n * width].reshape(width, n)
        if width == 1:
            return planes[0].astype(np.uint64)
        return np.ascontiguousarray(planes.T).view(f"<u{width}").reshape(n).astype(np.uint64)

    def picker(self, n: int) -> Callable[[int], int]:
        """The next column, read a value at a time (the few sources a lookup wants)."""
        width, start = self._start(n)
        body = self.body
        return lambda i: int.from_bytes(bytes(body[start + p * n + i] for p in range(width)), "little")

    def rest(self) -> bytes:
        return self.body[self.pos:]


_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    if not hasattr(_local, "cctx"):  # zstd contexts are not thread-safe: one per thread
        _local.cctx = zstandard.ZstdCompressor(level=BLOCK_ZSTD_LEVEL, write_checksum=False,
                                               write_content_size=True)
    return _local.cctx


def _decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_local, "dctx"):
        _local.dctx = zstandard.ZstdDecompressor()
    return _local.dctx


def _unsigned(ids: np.ndarray) -> np.ndarray:
    """Signed fact ids as unsigned integers in the same order (the sign bit flipped)."""
    return np.asarray(ids, dtype=np.int64).view(np.uint64) ^ np.uint64(1 << 63)


def encode_block(block: int, bits: int, fact_ids: np.ndarray, kinds: np.ndarray, id_codes: np.ndarray,
                 id_numbers: np.ndarray, value_codes: np.ndarray, value_lengths: np.ndarray,
                 strings: Sequence[str]) -> bytes:
    """One block of sources, each array one entry per source, sorted by fact id (a fact's
    sources together): ``kinds`` (index in KINDS), ``id_codes``/``id_numbers`` (3 rows:
    subject, property, object; :func:`split_id`), ``value_codes``/``value_lengths`` (the
    length in code points of a VALUE_IN_TEXT_SIZED value), and ``strings``: the texts of the
    CODE_STRING ids, subject's column first, then property's and object's, then the
    VALUE_STRING values, each column in source order.

    The columns: the sorted fact ids as unsigned deltas (the first from the block's start);
    each fact's source count; per source a shape (kind, value code and each id's class: null,
    the field's usual letter Q/P/Q, another letter, a string); the other letters' codes; the
    numbers of the lettered ids, field by field; the lengths of the sized values; the
    strings' lengths, then their UTF-8 bytes."""
    fact_ids = np.asarray(fact_ids, dtype=np.int64)
    n_sources = len(fact_ids)
    unsigned = _unsigned(fact_ids)
    if np.any(unsigned[1:] < unsigned[:-1]):
        raise InputRefused("a block's sources must be sorted by fact id")
    if np.any((fact_ids >> (64 - bits) if bits else np.zeros_like(fact_ids)) != block):
        raise InputRefused(f"a fact id outside block {block} ({bits} bits)")
    firsts = np.flatnonzero(np.concatenate([[True], unsigned[1:] != unsigned[:-1]])) if n_sources \
        else np.zeros(0, np.int64)
    facts = unsigned[firsts]
    counts = np.diff(np.append(firsts, n_sources))
    low = np.uint64((1 << (64 - bits)) - 1) if bits else np.uint64((1 << 64) - 1)
    deltas = np.diff(facts, prepend=np.uint64(0)) if len(facts) else facts
    if len(facts):
        deltas[0] = facts[0] & low
    id_codes = np.asarray(id_codes, dtype=np.uint64).reshape(3, n_sources)
    id_numbers = np.asarray(id_numbers, dtype=np.uint64).reshape(3, n_sources)
    value_codes = np.asarray(value_codes, dtype=np.uint64)
    classes = [np.select([codes == CODE_NULL, codes == usual, codes == CODE_STRING], [_NULL, _USUAL, _STRING],
                         _LETTER).astype(np.uint64) for codes, usual in zip(id_codes, _USUAL_LETTER)]
    shape = (np.asarray(kinds, dtype=np.uint64) | value_codes << np.uint64(2) | classes[0] << np.uint64(4)
             | classes[1] << np.uint64(6) | classes[2] << np.uint64(8))
    letters = np.concatenate([codes[c == _LETTER] for codes, c in zip(id_codes, classes)])
    numbers = [_column(nums[(c == _USUAL) | (c == _LETTER)]) for nums, c in zip(id_numbers, classes)]
    sized = np.asarray(value_lengths, dtype=np.uint64)[value_codes == VALUE_IN_TEXT_SIZED]
    encoded = [s.encode("utf-8") for s in strings]
    body = b"".join([
        _column(deltas), _column(counts), _column(shape), _column(letters), *numbers, _column(sized),
        _column(np.array([len(s) for s in encoded], dtype=np.uint64)), *encoded,
    ])
    crc = zlib.crc32(body, zlib.crc32(struct.pack("<q", block)))
    head = _BLOCK_HEAD.pack(BLOCK_MAGIC, BLOCK_VERSION, bits, 0, len(facts), n_sources, crc)
    return head + _compressor().compress(body)


def decode_block(data: bytes, block: int, bits: int, texts: Mapping[int, str]) -> list[tuple]:
    """The provenance rows ``(fact_id, kind, subject, property, object, value)`` of the ids
    of ``texts`` (fact id -> its text) that block ``block`` holds. A block that is not one
    (its header, its checksum, its columns, a value its fact's text cannot hold) is a
    FormatError: never a wrong source."""
    where = f"provenance block {block}"
    if len(data) < _BLOCK_HEAD.size:
        raise FormatError(f"{where}: {len(data)} bytes, shorter than its header")
    magic, version, stored_bits, _, n_facts, n_sources, crc = _BLOCK_HEAD.unpack_from(data)
    if magic != BLOCK_MAGIC or version != BLOCK_VERSION:
        raise FormatError(f"{where}: not a provenance block of version {BLOCK_VERSION} "
                          f"(magic {magic!r}, version {version})")
    if stored_bits != bits:
        raise FormatError(f"{where}: keyed by {stored_bits} bits, the build's blocks by {bits}")
    try:
        body = _decompressor().decompress(data[_BLOCK_HEAD.size:])
    except zstandard.ZstdError as exc:
        raise FormatError(f"{where}: its zstd frame does not decompress: {exc}") from exc
    if zlib.crc32(body, zlib.crc32(struct.pack("<q", block))) != crc:
        raise FormatError(f"{where}: checksum mismatch (damaged, or stored under another key)")
    columns = _Columns(body, where)
    deltas, counts = columns.whole(n_facts), columns.whole(n_facts)
    if int(counts.sum()) != n_sources or (n_facts and int(counts.min()) < 1):
        raise FormatError(f"{where}: its facts' source counts do not add up to {n_sources}")
    base = ((block + (1 << (bits - 1))) << (64 - bits)) & ((1 << 64) - 1) if bits else 0
    with np.errstate(over="ignore"):
        unsigned = np.cumsum(deltas, dtype=np.uint64) + np.uint64(base)
    # strictly increasing (a sum that wrapped past 2^64 is not) and within the block's range
    if n_facts and (np.any(unsigned[1:] <= unsigned[:-1]) or bits and (int(unsigned[-1]) - base) >> (64 - bits)):
        raise FormatError(f"{where}: its fact ids are not sorted within the block's range")
    # the shape's fields, one row each: kind, value code, then each id's class
    shape = columns.whole(n_sources).astype(np.int64)
    fields = shape[None, :] >> _SHAPE_SHIFTS[:, None] & 3
    if n_sources and (int(shape.max()) >> 10 or int(fields[2].min()) == _NULL):
        raise FormatError(f"{where}: a source of an unknown shape, or without a subject")
    classes = fields[2:]
    # which sources have an entry in each column that holds some sources only: the other
    # letters (3 fields), the numbers (3), the sized values, the strings (3 fields, values)
    masks = np.concatenate([classes == _LETTER, (classes == _USUAL) | (classes == _LETTER),
                            fields[1:2] == VALUE_IN_TEXT_SIZED, classes == _STRING, fields[1:2] == VALUE_STRING])
    totals = masks.sum(axis=1).tolist()
    letters = columns.whole(sum(totals[0:3]))
    numbers = [columns.picker(totals[3 + f]) for f in range(3)]
    sized = columns.picker(totals[6])
    string_lengths = columns.whole(sum(totals[7:]))
    string_bytes = columns.rest()
    string_ends = np.cumsum(string_lengths).tolist()
    if (string_ends[-1] if string_ends else 0) != len(string_bytes):
        raise FormatError(f"{where}: its strings' lengths do not add up to their bytes")
    if len(letters) and (int(letters.min()) < 1 or int(letters.max()) > 26):
        raise FormatError(f"{where}: a letter code outside A-Z")

    facts = (unsigned ^ np.uint64(1 << 63)).view(np.int64)
    wanted = np.array(sorted(texts), dtype=np.int64)
    at = np.searchsorted(facts, wanted).tolist()
    first_source = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
    sources = [(fid, s) for fid, i in zip(wanted.tolist(), at) if i < n_facts and facts[i] == fid
               for s in range(first_source[i], first_source[i + 1])]
    if not sources:
        return []
    picked = np.array([s for _, s in sources])
    # a source's entry in such a column: its rank among the sources that have one
    ranks = (np.cumsum(masks[:, :int(picked.max()) + 1], axis=1)[:, picked] - 1).T.tolist()
    shapes = fields[:, picked].T.tolist()
    letter_base = [0, totals[0], totals[0] + totals[1]]
    string_base = np.concatenate([[0], np.cumsum(totals[7:])]).tolist()
    letter_codes = letters.tolist()

    def string(k: int) -> str:
        try:
            return string_bytes[string_ends[k - 1] if k else 0:string_ends[k]].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{where}: a string is not UTF-8") from exc

    rows = []
    for (fid, _), (kind, value_code, *id_classes), rank in zip(sources, shapes, ranks):
        ids: list[str | None] = []
        for field, cls in enumerate(id_classes):
            if cls == _NULL:
                ids.append(None)
            elif cls == _STRING:
                ids.append(string(string_base[field] + rank[7 + field]))
            else:
                code = _USUAL_LETTER[field] if cls == _USUAL else letter_codes[letter_base[field] + rank[field]]
                ids.append(f"{chr(64 + code)}{numbers[field](rank[3 + field])}")
        value = None
        text = texts[fid]
        if value_code == VALUE_STRING:
            value = string(string_base[3] + rank[10])
        elif value_code == VALUE_IN_TEXT:
            cut = text.rfind(SEPARATOR)
            if cut < 0 or not text.endswith(END) or cut + len(SEPARATOR) > len(text) - len(END):
                raise FormatError(f"{where}: fact {fid}'s value is not in its text")
            value = text[cut + len(SEPARATOR):-len(END)]
        elif value_code == VALUE_IN_TEXT_SIZED:
            n = sized(rank[6])
            if not (text.endswith(END) and len(text) >= n + 4 and text[-n - 4] == "<"):
                raise FormatError(f"{where}: fact {fid}'s value of {n} characters is not in its text")
            value = text[-n - 3:-3]
        rows.append((fid, KINDS[kind], ids[0], ids[1], ids[2], value))
    return rows


def sources_from_blocks(texts: Mapping[int, str], bits: int,
                        fetch: Callable[[list[int]], Iterable[Sequence[Any]]], where: str) -> list[tuple]:
    """The provenance rows of the fact ids of ``texts`` (id -> text) from a build's blocks:
    ``fetch(keys)`` reads the ``(block, data)`` rows of all their blocks at once (one round
    trip). Every key has a block (the loader stores empty ones too): one that is not found,
    or does not decode, is a FormatError naming ``where``."""
    wanted: dict[int, dict[int, str]] = {}
    for fid, text in texts.items():
        wanted.setdefault(block_of(fid, bits), {})[fid] = text
    if not wanted:
        return []
    found = {int(key): bytes(data) for key, data in fetch(sorted(wanted))}
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise FormatError(f"{where}: provenance block{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(map(str, missing[:5]))} missing (every key of the build has one): "
                          "its provenance is damaged")
    rows: list[tuple] = []
    for key, ids in wanted.items():
        try:
            rows += decode_block(found[key], key, bits, ids)
        except FormatError as exc:
            raise FormatError(f"{where}: {exc}") from exc
    return rows
