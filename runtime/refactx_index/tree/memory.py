"""An in-memory index for small graphs (a corporate graph of 10k triples needs no database).

It stores exactly the rows a PostgreSQL build would hold (same cut rule, same
fragment encoding) and walks them with the same code, so both indexes give the same
answers. It can be saved to and loaded from one file (``.rfx``):

    magic        8 bytes   b"RFXTREE3"
    header_len   uint32 LE
    crc32        uint32 LE  of everything after it: the header, dictionary and records as stored
    header       JSON (utf-8): the IndexInfo fields, "records", "dictionary_bytes"
    dictionary   the build's preset dictionary (format versions 3, 4), dictionary_bytes long
    records      per row: prefix_len uint32 LE, node_len uint32 LE, prefix, node

Nothing in the file is unpickled or evaluated; every length is checked. Files of the first
layout (``b"RFXTREE1"``: no crc32 field, a crc32 of the records alone in the JSON header, so
a changed header byte went unnoticed) are still read, with a warning that says how to
rewrite them; the build they describe is unchanged. Files of the second layout
(``b"RFXTREE2"``: no dictionary) are read as they are. A header written before 0.2.0 names
the vocabulary ``tokenizer`` and ``tokenizer_hash``; it is read as ``vocabulary`` and
``vocabulary_sha256``.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from dataclasses import asdict, fields
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import FormatError, InputRefused
from ..vocab import ENCODED_OK, VocabularyLike, as_vocabulary, encode_facts
from .cache import ByteLRUCache
from .format import (
    FORMAT_VERSION,
    READABLE_VERSIONS,
    PresetDictionary,
    encode_children,
    encode_packed,
    encode_prefix,
    encode_subtree,
    encode_subtree_runs,
    make_dictionary,
    with_dictionary,
)
from .index import (
    IndexInfo,
    RowTreeIndex,
    ServedBuild,
    check_vocabulary,
    fragment_nbytes,
)

log = logging.getLogger(__name__)

MAGIC = b"RFXTREE3"
MAGIC_V2 = b"RFXTREE2"  # no dictionary: read as it is
MAGIC_V1 = b"RFXTREE1"  # header outside the checksum: read with a warning
_U32 = struct.Struct("<I")
_RECORD = struct.Struct("<II")
DEFAULT_CACHE_BYTES = 64 << 20


# the pipeline's defaults too (tree.subtree_threshold, tree.max_subtree_tokens), chosen by
# measurement (docs/scale.md, "Index size")
DEFAULT_SUBTREE_THRESHOLD = 1024
DEFAULT_MAX_SUBTREE_TOKENS = 32768
# packed rows (docs/tree.md, "The cut rule"), the pipeline's defaults: an expanded prefix of at
# most PACK_FACTS_PER_THRESHOLD x T facts stores whole its children of at most
# T / PACK_CHILD_DIVISOR facts; none below T = PACK_MIN_THRESHOLD (small test trees keep the
# plain cut). Measured on the wikidata preset's 235k facts (docs/scale.md, "The wikidata
# preset"): children of at most 64 facts 0.019 rows/fact, of at most 16 0.024, plain cut 0.045
PACK_FACTS_PER_THRESHOLD = 4
PACK_CHILD_DIVISOR = 16
PACK_MIN_THRESHOLD = 64


def pack_bounds(threshold: int) -> tuple[int, int]:
    """The pipeline's default packed-row bounds for ``threshold`` (T): (facts, child facts)."""
    if threshold < PACK_MIN_THRESHOLD:
        return 0, 0
    return PACK_FACTS_PER_THRESHOLD * threshold, threshold // PACK_CHILD_DIVISOR


def build_rows(
    sequences: Iterable[Sequence[int]],
    *,
    threshold: int = DEFAULT_SUBTREE_THRESHOLD,
    max_subtree_tokens: int = DEFAULT_MAX_SUBTREE_TOKENS,
    pack_facts: int = 0,
    pack_child_facts: int = 0,
) -> dict[bytes, bytes]:
    """The rows ``{prefix key: fragment}`` of the tree of ``sequences`` under the cut rule.

    A prefix is *expanded* (its row lists its children, each an external row of its
    own) when more than ``threshold`` facts lie below it or their tokens after the
    prefix number more than ``max_subtree_tokens``; any other row stores its whole
    subtree, so every row is bounded by facts and bytes at any depth. An expanded prefix
    of at most ``pack_facts`` facts (and ``max_subtree_tokens x pack_facts / threshold``
    tokens) is *packed*: its children of at most ``pack_child_facts`` facts (and
    ``max_subtree_tokens`` tokens) are stored whole in its row, the others are external
    (``pack_facts=0``: none is packed). Duplicate sequences collapse. This is the reference
    the Spark job must agree with, row for row. The plain cut runs vectorized
    (:func:`plain_cut_rows`); a packed cut walks the sorted sequences in Python.
    """
    if threshold < 1:
        raise InputRefused("threshold must be >= 1")
    if max_subtree_tokens < 1:
        raise InputRefused("max_subtree_tokens must be >= 1")
    if pack_facts <= 0:
        ids = [tuple(map(int, s)) for s in sequences]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter((t for s in ids for t in s), dtype=np.int64, count=int(offsets[-1]))
        return plain_cut_rows(*sorted_distinct(values, offsets), threshold, max_subtree_tokens)
    seqs = sorted({tuple(map(int, s)) for s in sequences})
    if not seqs:
        raise InputRefused("an index needs at least one fact")
    if len(seqs[0]) == 0:
        raise InputRefused("a fact must have at least one token")
    lengths = [len(s) for s in seqs]
    total = [0]
    for n in lengths:
        total.append(total[-1] + n)
    pack_tokens = max_subtree_tokens * pack_facts // threshold
    rows: dict[bytes, bytes] = {}
    # explicit stack: (lo, hi, d) -- seqs[lo:hi] share their first d tokens
    stack = [(0, len(seqs), 0)]
    while stack:
        lo, hi, d = stack.pop()
        key = encode_prefix(seqs[lo][:d])
        below_tokens = total[hi] - total[lo] - d * (hi - lo)
        if hi - lo <= threshold and below_tokens <= max_subtree_tokens:
            rows[key] = encode_subtree([s[d:] for s in seqs[lo:hi]])
            continue
        ends = len(seqs[lo]) == d  # sorted: the prefix itself comes first
        packs = hi - lo <= pack_facts and below_tokens <= pack_tokens
        i = lo + 1 if ends else lo
        toks: list[int] = []
        counts: list[int] = []
        inline: list[Sequence[int]] = [()] if ends else []
        while i < hi:
            tok = seqs[i][d]
            j = i + 1
            while j < hi and seqs[j][d] == tok:
                j += 1
            if packs and j - i <= pack_child_facts and total[j] - total[i] - (d + 1) * (j - i) <= max_subtree_tokens:
                inline.extend(s[d:] for s in seqs[i:j])
            else:
                toks.append(tok)
                counts.append(j - i)
                stack.append((i, j, d + 1))
            i = j
        if packs and len(inline) > int(ends):
            rows[key] = encode_packed(inline, toks, counts)
        else:
            rows[key] = encode_children(toks, counts, ends)
    return rows


def sorted_distinct(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct sequences ``values[offsets[i]:offsets[i+1]]`` in lexicographic order, as a
    -1-padded matrix (a sequence sorts before its extensions), their lengths, and each one's
    common prefix length with the one before (:func:`common_prefixes`). Refuses no sequence and
    an empty one, as :func:`build_rows` does."""
    lengths = np.diff(offsets)
    if lengths.size == 0:
        raise InputRefused("an index needs at least one fact")
    if int(lengths.min()) == 0:
        raise InputRefused("a fact must have at least one token")
    width = int(lengths.max())
    mat = np.full((lengths.size, width), -1, dtype=np.int64)
    mat[np.arange(width)[None, :] < lengths[:, None]] = values  # row-major: each sequence's ids in order
    order = np.lexsort(mat.T[::-1])
    mat, lengths = mat[order], lengths[order]
    lcp = common_prefixes(mat)
    if lengths.size > 1 and (lcp[1:] == width).any():  # duplicates out
        keep = np.concatenate(([True], lcp[1:] < width))
        mat, lengths = mat[keep], lengths[keep]
        lcp = common_prefixes(mat)
    return mat, lengths, lcp


def common_prefixes(mat: np.ndarray) -> np.ndarray:
    """``lcp[i]``: the common prefix length of rows i - 1 and i of a padded matrix (0 for i = 0)."""
    if mat.shape[0] < 2:
        return np.zeros(mat.shape[0], dtype=np.int64)
    differs = mat[1:] != mat[:-1]
    first = np.where(differs.any(axis=1), differs.argmax(axis=1), mat.shape[1])
    return np.concatenate(([0], first)).astype(np.int64)


def plain_cut_rows(mat: np.ndarray, lengths: np.ndarray, lcp: np.ndarray, threshold: int,
                   max_subtree_tokens: int) -> dict[bytes, bytes]:
    """The plain cut's rows of the sorted, distinct, -1-padded sequences ``mat``
    (:func:`sorted_distinct`), with each expanded row's children found by numpy over its range
    and every whole-subtree row encoded in one ``encode_subtree_runs`` call (the pipeline's
    prefix rows job's encoder): no Python work per sequence, only per row."""
    total = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=total[1:])
    rows: dict[bytes, bytes] = {}
    leaf_lo: list[int] = []
    leaf_hi: list[int] = []
    leaf_depth: list[int] = []
    stack = [(0, int(lengths.size), 0)]
    while stack:
        lo, hi, d = stack.pop()
        if hi - lo <= threshold and int(total[hi] - total[lo]) - d * (hi - lo) <= max_subtree_tokens:
            leaf_lo.append(lo)
            leaf_hi.append(hi)
            leaf_depth.append(d)
            continue
        ends = bool(lengths[lo] == d)  # sorted: the prefix itself comes first
        first = lo + 1 if ends else lo
        # rows of [first, hi) share d tokens; a child starts where a row differs at column d
        starts = np.concatenate(([first], first + 1 + np.flatnonzero(lcp[first + 1:hi] <= d)))
        stops = np.append(starts[1:], hi)
        rows[encode_prefix(mat[lo, :d].tolist())] = encode_children(
            mat[starts, d].tolist(), (stops - starts).tolist(), ends)
        stack.extend((a, b, d + 1) for a, b in zip(starts.tolist(), stops.tolist()))
    if leaf_lo:
        encoded = encode_subtree_runs(mat, lengths, lcp, leaf_lo, leaf_hi, leaf_depth)
        for lo, d, row in zip(leaf_lo, leaf_depth, encoded):
            rows[encode_prefix(mat[lo, :d].tolist())] = row
    return rows


def compress_rows(rows: Mapping[bytes, bytes]) -> tuple[dict[bytes, bytes], PresetDictionary | None]:
    """Rows of ``build_rows`` compressed against their build's preset dictionary (format
    version 4), made from them as the Spark job makes it: the same rows, the same bytes."""
    dictionary = make_dictionary(rows.items())
    if dictionary is None:
        return dict(rows), None
    return {key: with_dictionary(node, dictionary) for key, node in rows.items()}, dictionary


def deepest_row(rows: Iterable[bytes]) -> int:
    """The longest row prefix, in tokens (a lookup from the root never needs rows deeper)."""
    return max((len(k) // 4 for k in rows), default=0)


def encode_texts(vocabulary: "VocabularyLike", texts: Sequence[str]) -> list[list[int]]:
    """Token ids of ``texts`` without special tokens (no BOS), batch-encoded."""
    return as_vocabulary(vocabulary).encode(texts)


# IndexInfo fields renamed in 0.2.0 (old -> new), as files written before it name them
_RENAMED_HEADER_FIELDS = (("tokenizer", "vocabulary"), ("tokenizer_hash", "vocabulary_sha256"))


class MemoryTreeIndex(RowTreeIndex):
    """The rows of one build held in a dict; decoded rows cached like the PostgreSQL index."""

    def __init__(
        self, rows: Mapping[bytes, bytes], info: IndexInfo, *, cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        if b"" not in rows:
            raise FormatError("an index needs a root row (key b'')")
        self._rows = dict(rows)
        super().__init__(ServedBuild(info, ByteLRUCache(cache_bytes, fragment_nbytes), self._fetch_rows))

    @property
    def rows(self) -> Mapping[bytes, bytes]:
        return self._rows

    def _fetch_rows(self, keys: list[bytes]) -> dict[bytes, bytes]:
        rows = self._rows
        return {k: rows[k] for k in keys if k in rows}

    # ------------------------------------------------------------------ building
    @classmethod
    def from_sequences(
        cls,
        sequences: Iterable[Sequence[int]],
        *,
        name: str = "memory",
        vocabulary: str = "",
        vocabulary_sha256: str = "",
        vocab_size: int = 0,
        threshold: int = DEFAULT_SUBTREE_THRESHOLD,
        max_subtree_tokens: int = DEFAULT_MAX_SUBTREE_TOKENS,
        fact_prefix: str = " ",
        fact_suffix: str = "",
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        dictionary: bool = True,
        index_kind: str = "facts",
        pack: tuple[int, int] = (0, 0),
    ) -> "MemoryTreeIndex":
        """An index of token sequences (already tokenized facts); ``dictionary``: rows
        compressed against a preset dictionary of the build (format version 4); ``index_kind``:
        ``paths`` for reasoning paths (``IndexInfo.index_kind``); ``pack``: ``build_rows``'s
        (pack_facts, pack_child_facts)."""
        seqs = {tuple(map(int, s)) for s in sequences}
        rows = build_rows(seqs, threshold=threshold, max_subtree_tokens=max_subtree_tokens,
                          pack_facts=pack[0], pack_child_facts=pack[1])
        preset = None
        if dictionary:
            rows, preset = compress_rows(rows)
        info = IndexInfo(
            name=name,
            vocabulary=vocabulary,
            vocabulary_sha256=vocabulary_sha256,
            vocab_size=vocab_size,
            depth=deepest_row(rows),
            subtree_threshold=threshold,
            format_version=FORMAT_VERSION,
            fact_prefix=fact_prefix,
            fact_suffix=fact_suffix,
            facts=len(seqs),
            rows=len(rows),
            dictionary=preset,
            index_kind=index_kind,
        )
        return cls(rows, info, cache_bytes=cache_bytes)

    @classmethod
    def from_id_arrays(cls, values: np.ndarray, offsets: np.ndarray, *, name: str, vocabulary: str,
                       vocabulary_sha256: str, vocab_size: int, index_kind: str = "facts") -> "MemoryTreeIndex":
        """:meth:`from_sequences` of the sequences ``values[offsets[i]:offsets[i+1]]`` with its
        defaults and no preset dictionary: the same rows and description, without a Python tuple
        per sequence (a per-question path index lives for one question: a dictionary, and
        inflating every row against it, would save memory nobody keeps)."""
        mat, lengths, lcp = sorted_distinct(values, offsets)
        rows = plain_cut_rows(mat, lengths, lcp, DEFAULT_SUBTREE_THRESHOLD, DEFAULT_MAX_SUBTREE_TOKENS)
        info = IndexInfo(name=name, vocabulary=vocabulary, vocabulary_sha256=vocabulary_sha256, vocab_size=vocab_size,
                         depth=deepest_row(rows), subtree_threshold=DEFAULT_SUBTREE_THRESHOLD,
                         format_version=FORMAT_VERSION, fact_prefix=" ", fact_suffix="", facts=int(lengths.size),
                         rows=len(rows), index_kind=index_kind)
        return cls(rows, info)

    @classmethod
    def from_facts(
        cls,
        facts: Iterable[str],
        vocabulary: "VocabularyLike",
        *,
        name: str = "memory",
        fact_prefix: str = " ",
        fact_suffix: str = "",
        threshold: int = DEFAULT_SUBTREE_THRESHOLD,
        max_subtree_tokens: int = DEFAULT_MAX_SUBTREE_TOKENS,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        index_kind: str = "facts",
        dictionary: bool = True,
    ) -> "MemoryTreeIndex":
        """Tokenize ``fact_prefix + fact + fact_suffix`` for each fact text, exactly as the
        pipeline's tokenize stage does (``vocab.encode_facts``), and index them.

        ``vocabulary``: a :class:`~refactx_index.vocab.Vocabulary` or anything
        :func:`~refactx_index.vocab.as_vocabulary` takes; one read from a ``tokenizer.json``
        (a path) is recorded by name and sha256 like a PostgreSQL build. Raises
        :class:`InputRefused` (a ``ValueError``) for a fact that cannot be stored.
        """

        vocab = as_vocabulary(vocabulary)
        texts = list(facts)
        # the tokenize stage's encoding: in the context of the trigger, as a model writes it
        encoded = encode_facts(vocab.tokenizer(), texts, vocab.forbidden_ids, fact_prefix, fact_suffix)
        failed = [texts[i] for i in range(len(texts)) if encoded.status[i] != ENCODED_OK]
        if failed:
            raise InputRefused(f"{len(failed)} facts cannot be stored (special tokens, or fused with the "
                               f"trigger), e.g. {failed[0]!r}")
        ids = [encoded.ids(i) for i in range(len(texts))]
        if any(not s for s in ids):
            raise InputRefused("a fact tokenizes to no token at all")
        return cls.from_sequences(
            ids,
            name=name,
            vocabulary=vocab.name if vocab.from_file else "",
            vocabulary_sha256=vocab.sha256 if vocab.from_file else "",
            vocab_size=vocab.vocab_size,
            threshold=threshold,
            max_subtree_tokens=max_subtree_tokens,
            fact_prefix=fact_prefix,
            fact_suffix=fact_suffix,
            cache_bytes=cache_bytes,
            index_kind=index_kind,
            dictionary=dictionary,
        )

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the rows and the build description to one file (atomically replaced)."""
        parts: list[bytes] = []
        for key in sorted(self._rows):
            node = self._rows[key]
            parts.append(_RECORD.pack(len(key), len(node)))
            parts.append(key)
            parts.append(node)
        dictionary = self.info.dictionary.data if self.info.dictionary is not None else b""
        body = dictionary + b"".join(parts)
        header = asdict(self.info)
        del header["dictionary"]  # stored as bytes after the header, not in its JSON
        header.update(records=len(self._rows), dictionary_bytes=len(dictionary))
        head = json.dumps(header, sort_keys=True).encode("utf-8")
        crc = zlib.crc32(body, zlib.crc32(head))  # the header too: a changed byte there is caught
        tmp = Path(f"{os.fspath(path)}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + _U32.pack(len(head)) + _U32.pack(crc) + head + body)
        os.replace(tmp, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        vocabulary: "VocabularyLike | None" = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> "MemoryTreeIndex":
        """Read a file written by :meth:`save`; checks its format and, if given, the vocabulary."""
        data = Path(path).read_bytes()
        magic = data[: len(MAGIC)]
        if magic not in (MAGIC, MAGIC_V2, MAGIC_V1):
            raise FormatError(f"{path}: not a refactx_index tree file")
        pos = len(MAGIC)
        fixed = 4 if magic == MAGIC_V1 else 8
        if len(data) < pos + fixed:
            raise FormatError(f"{path}: truncated header")
        (head_len,) = _U32.unpack_from(data, pos)
        if magic != MAGIC_V1:
            (stored_crc,) = _U32.unpack_from(data, pos + 4)
            if zlib.crc32(memoryview(data)[pos + fixed:]) != stored_crc:
                raise FormatError(f"{path}: checksum mismatch (truncated or corrupt file)")
        pos += fixed
        try:
            header = json.loads(data[pos : pos + head_len].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FormatError(f"{path}: header is not JSON: {exc}") from exc
        pos += head_len
        if not isinstance(header, dict):
            raise FormatError(f"{path}: header is not a JSON object")
        if magic == MAGIC_V1:
            if zlib.crc32(memoryview(data)[pos:]) != header.get("crc32"):
                raise FormatError(f"{path}: checksum mismatch (truncated or corrupt file)")
            # still served (the rows carry their own checksums), but a changed header byte
            # (a fact prefix, the vocabulary) would go unnoticed: say how to close that gap
            log.warning(
                "%s: an .rfx file of the first layout, whose header is not covered by its "
                "checksum; rewrite it with MemoryTreeIndex.load(path).save(path)", path)
        dictionary = None
        if magic == MAGIC:
            size = header.get("dictionary_bytes")
            if not isinstance(size, int) or size < 0 or pos + size > len(data):
                raise FormatError(f"{path}: corrupt dictionary length {size!r}")
            if size:
                dictionary = PresetDictionary(data[pos : pos + size])
            pos += size
        known = {f.name for f in fields(IndexInfo)} - {"dictionary"}
        for before, now in _RENAMED_HEADER_FIELDS:  # a file written before 0.2.0
            if before in header and now not in header:
                header[now] = header.pop(before)
        try:
            info = IndexInfo(**{k: v for k, v in header.items() if k in known}, dictionary=dictionary)
        except TypeError as exc:
            raise FormatError(f"{path}: header lacks fields: {exc}") from exc
        if info.format_version not in READABLE_VERSIONS:
            raise FormatError(
                f"{path}: format version {info.format_version}; this runtime reads "
                f"{', '.join(map(str, READABLE_VERSIONS))}"
            )
        rows: dict[bytes, bytes] = {}
        end = len(data)
        while pos < end:
            if pos + _RECORD.size > end:
                raise FormatError(f"{path}: truncated record header")
            klen, nlen = _RECORD.unpack_from(data, pos)
            pos += _RECORD.size
            if pos + klen + nlen > end or klen % 4:
                raise FormatError(f"{path}: corrupt record")
            key = data[pos : pos + klen]
            rows[key] = data[pos + klen : pos + klen + nlen]
            pos += klen + nlen
        if len(rows) != header.get("records"):
            raise FormatError(f"{path}: {len(rows)} records, header says {header.get('records')}")
        index = cls(rows, info, cache_bytes=cache_bytes)
        check_vocabulary(index, vocabulary)
        return index
