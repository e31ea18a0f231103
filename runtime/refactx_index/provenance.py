"""Where a stored fact comes from: its fact id and the sources it was verbalized from.

The pipeline's verbalize stage writes one provenance row per (fact, source) and the load
stage stores them beside the tree, in the build's partition ``provenance_b<build_id>``
(docs/provenance.md). A fact is found there by its ``fact_id``, which verbalize computes as
Spark's ``xxhash64(text)``. The runtime computes the same id from the text with
:func:`fact_id` (XXH64, seed 42, over the text's UTF-8 bytes, as Spark's ``XXH64`` does),
so the table needs no copy of the text (8 bytes a row instead of ~60) and its key is the
id the rest of the pipeline already uses. ``tests/test_provenance.py`` checks it against
Spark on every fact of a build and on texts of every length class and script.

Only stored facts are looked up: verbalize drops a fact whose id collides with another
fact's, so a stored text's id names that fact alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

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
