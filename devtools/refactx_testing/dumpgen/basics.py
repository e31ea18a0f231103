"""Small helpers of the generator (Zipf and weighted draws, N-Triples and SQL literals, IRIs) and
the ``Plan`` of a dump.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from refactx_testing.dumpgen.shape import CLASS_INDEX, ENTITY, LINE_MIXES, PRESETS


# ====================================================================== small helpers


def _zipf_cdf(n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _pick_cdf(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1)


def _weighted(rng: np.random.Generator, weights: Sequence[float], n: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    cdf = np.cumsum(w / w.sum())
    return _pick_cdf(rng, cdf, n)


def _join(words: np.ndarray, counts: np.ndarray) -> list[str]:
    """Row i: the first counts[i] words of words[i], joined by spaces."""
    rows = words.tolist()
    return [" ".join(r[:c]) for r, c in zip(rows, counts.tolist())]


def _objects(values: Iterable[str]) -> np.ndarray:
    out = np.empty(len(values) if hasattr(values, "__len__") else 0, dtype=object)
    out[:] = list(values)
    return out


_HEX_ESCAPE = re.compile(r"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|\\u([0-9a-f]{4})")


def nt_literal(texts: Sequence[str]) -> np.ndarray:
    """N-Triples literals in quotes, non-ASCII escaped as the dumps write it: ``\\u00E9``
    (upper-case hex), ``\\U0001F1EE`` beyond the BMP."""
    return _objects(['"' + t + '"' if t.isascii() and t.isprintable() and '"' not in t and "\\" not in t
                     else _HEX_ESCAPE.sub(_upper_hex, json.dumps(t)) for t in texts])


def _upper_hex(m: re.Match) -> str:
    if m.group(3):
        return "\\u" + m.group(3).upper()
    code = 0x10000 + ((int(m.group(1), 16) - 0xD800) << 10) + (int(m.group(2), 16) - 0xDC00)
    return f"\\U{code:08X}"


def sql_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _iri(qids: np.ndarray, prefix: str = "Q") -> np.ndarray:
    return _objects(["<" + ENTITY + prefix + s + ">" for s in map(str, qids.tolist())])


# ====================================================================== the plan


@dataclass
class Plan:
    """Every item of the dump, decided from the seed alone (cheap; each worker recomputes it)."""

    seed: int
    lines: int
    skew_facts: int
    line_mix: str
    chunk_lines: int
    cls: np.ndarray  # class code (index into ALL_CLASSES)
    qid: np.ndarray
    n_body: np.ndarray
    n_tail: np.ndarray  # articles: cites work
    en_label: np.ndarray
    en_desc: np.ndarray
    sitelinked: np.ndarray  # an English Wikipedia article (or category page) in the page dump
    shortdesc: np.ndarray
    lost_sitelink: np.ndarray  # a wikibase_item row whose page is missing from the page dump
    n_other: np.ndarray  # other languages with a label
    n_other_desc: np.ndarray
    n_alias: np.ndarray
    no_value: np.ndarray
    chunks: list[tuple[int, int]]
    hostile_at: dict[int, list[str]]  # item index -> hostile reasons written after it
    members: dict[int, np.ndarray] = field(default_factory=dict)
    preset: str = "dense"  # what texts and values are drawn from (shape.PRESETS)

    @property
    def items(self) -> int:
        return len(self.qid)

    def displayable(self) -> np.ndarray:
        """Items the labels stage gives a label: a main-namespace title, else label + description."""
        titled = self.sitelinked & (self.cls != CLASS_INDEX["category"])
        return titled | (self.en_label & self.en_desc)


def _line_mix(name: str) -> tuple[int, float, float]:
    if name not in LINE_MIXES:
        raise ValueError(f"line_mix {name!r}: expected one of {', '.join(LINE_MIXES)}")
    return LINE_MIXES[name]


def _preset(name: str) -> str:
    if name not in PRESETS:
        raise ValueError(f"preset {name!r}: expected one of {', '.join(PRESETS)}")
    return name
