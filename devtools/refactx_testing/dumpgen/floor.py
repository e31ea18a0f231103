"""How compressible a set of verbalized facts is: the "compression floor".

An index stores the sorted, de-duplicated facts; whatever structure it uses, it cannot beat
a good general compressor on those same sorted facts by much. So the floor is a yardstick
for the facts themselves: a generator whose facts compress far better than real Wikidata
facts makes every size measured on its dumps look better than it will be.

``compression_floor(texts)``: bytes per fact of the sorted, de-duplicated texts compressed
with zstd (one frame, ``level``), their mean characters, words and (with a tokenizer) token
ids per fact, and the same floor for the token ids as bench/bench_e2e.py measures a build's
(uint32 big-endian, the distinct id sequences sorted and concatenated). ``whole_subjects(texts, n)``: whole subjects drawn until ``n`` facts, so
that two fact sets can be compared at the same size (per-fact compressed size falls as a
corpus grows: a floor is only comparable at the same fact count).
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Sequence

import numpy as np

ZSTD_LEVEL = 19


def split_fact(text: str) -> tuple[str, str, str] | None:
    """``(subject, property, object)`` of ``<S> <P> <O> .`` (the verbalize stage's text; a
    leading space, as a model writes it, is allowed), or None when it is not that shape.

    The property label never holds ``> <`` (property labels are short names); the subject
    may, rarely, so the split takes the property as the second-to-last bracketed part."""
    text = text.lstrip(" ")
    if not (text.startswith("<") and text.endswith("> .")):
        return None
    parts = text[1:-3].split("> <")
    if len(parts) < 3:
        return None
    # a label with "> <" in it: the subject takes the surplus, the property stays one part
    # (objects with "> <" would be misassigned; rare enough for a share of distinct values)
    return "> <".join(parts[:-2]), parts[-2], parts[-1]


def whole_subjects(texts: Sequence[str], n: int, seed: int = 0) -> list[str]:
    """Facts of whole subjects, drawn in a seeded random order, until at least ``n`` facts
    (all of them when there are fewer): the subset a floor is compared on."""
    by_subject: dict[str, list[str]] = collections.defaultdict(list)
    for t in sorted(set(texts)):
        parts = split_fact(t)
        by_subject[parts[0] if parts else t].append(t)
    subjects = sorted(by_subject)
    order = np.random.default_rng(seed).permutation(len(subjects))
    out: list[str] = []
    for i in order.tolist():
        if len(out) >= n:
            break
        out.extend(by_subject[subjects[i]])
    return out


def compression_floor(texts: Sequence[str], tokenizer: Any | None = None, level: int = ZSTD_LEVEL,
                      fact_prefix: str = " ") -> dict[str, Any]:
    """The floor of ``texts`` (module docstring). ``tokenizer``: a ``tokenizers.Tokenizer``
    (or None: no token figures); it encodes ``fact_prefix + text``, as the tokenize stage
    does with its default ``tokenize.fact_prefix``. Needs the ``zstandard`` package."""
    import zstandard

    facts = sorted(set(texts))
    n = len(facts)
    if n == 0:
        raise ValueError("no facts to measure")
    blob = "\n".join(facts).encode("utf-8") + b"\n"
    packed = zstandard.ZstdCompressor(level=level).compress(blob)
    split = [split_fact(t) for t in facts]
    shaped = [p for p in split if p is not None]
    subjects = collections.Counter(p[0] for p in shaped)
    objects = collections.Counter(p[2] for p in shaped)
    props = collections.Counter(p[1] for p in shaped)
    words = np.array([len(t.split()) for t in facts])
    out: dict[str, Any] = {
        "facts": n,
        "zstd_level": level,
        "text_bytes_per_fact": round(len(blob) / n, 2),
        "zstd_text_bytes_per_fact": round(len(packed) / n, 2),
        "chars_per_fact": round(sum(len(t) for t in facts) / n, 2),
        "words_per_fact": round(float(words.mean()), 2),
        # distinct values per fact: 1.0 would be a value never repeated
        "distinct_subjects_per_fact": round(len(subjects) / n, 3),
        "distinct_properties_per_fact": round(len(props) / n, 3),
        "distinct_objects_per_fact": round(len(objects) / n, 3),
        # the share of facts whose object is one of the 10 most frequent objects
        "top10_objects_share": round(sum(c for _, c in objects.most_common(10)) / n, 3),
        "distinct_words_per_fact": round(len({w for t in facts for w in t.split()}) / n, 3),
    }
    if tokenizer is not None:
        encoded = tokenizer.encode_batch([fact_prefix + t for t in facts], add_special_tokens=False)
        lengths = np.array([len(e.ids) for e in encoded])
        distinct, packed_ids = token_ids_floor(np.asarray(e.ids, dtype=">u4").tobytes() for e in encoded)
        out.update({
            "tokens_per_fact": round(float(lengths.mean()), 2),
            "zstd_token_bytes_per_fact": round(packed_ids / distinct, 2),
        })
    return out


def token_ids_floor(sequences: Iterable[bytes], level: int = ZSTD_LEVEL) -> tuple[int, int]:
    """(distinct sequences, their zstd size in bytes) of token id sequences, each given as
    big-endian uint32 bytes (so byte order is token order): the distinct sequences sorted,
    concatenated and compressed in one frame. ``bench/bench_e2e.py`` measures a build's
    tokens with it."""
    import zstandard

    seqs = sorted(set(sequences))
    if not seqs:
        raise ValueError("no token sequences to measure")
    return len(seqs), len(zstandard.ZstdCompressor(level=level).compress(b"".join(seqs)))
