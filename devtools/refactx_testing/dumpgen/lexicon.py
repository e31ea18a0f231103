"""The realistic preset's vocabularies: tens of thousands of generated words and names.

Why: the dense preset draws titles from ~200 science words and names from ~100 given x ~200
family names, so its facts repeat the same few hundred words however large the dump, while
real facts' vocabulary keeps growing with the corpus (Heaps' law). Here the real word lists
stay at the head of each Zipf distribution (the common words and names) and a long tail of
pronounceable generated words follows, so a larger dump keeps meeting new words. (Measured
by bench/bench_realism.py: this moves the facts' zstd floor of texts by 6% at most;
docs/scale.md.)
Deterministic: one fixed seed, the same for every dump
seed (like the tail properties), built once per process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refactx_testing.dumpgen.basics import _zipf_cdf
from refactx_testing.dumpgen.shape import FAMILY, GIVEN, SCIENCE

# onsets, nuclei and codas of plain syllables (repeats are weights): the words look like
# words and, like real rare words and names, take 2-3 Qwen2.5 tokens each (clusters such as
# "schw" or "kr" made 4-5-token words and facts longer than real ones)
_ONSETS = ("b c d f g h k l m n p r s t v w z b d g k l m n p r s t br tr st ch sh th gr pr "
           "").split() + [""] * 8
_NUCLEI = "a e i o u a e i o a e o u ai ea ou y".split()
_CODAS = "n r s l t m n r s nd st".split() + [""] * 22


def _words(rng: np.random.Generator, n: int, syllables: tuple[float, ...]) -> np.ndarray:
    """``n`` generated words (repeats possible), ``syllables[k]``: the weight of k+1 syllables."""
    w = np.asarray(syllables, dtype=np.float64)
    count = rng.choice(len(w), n, p=w / w.sum()) + 1
    out = np.full(n, "", dtype=object)
    for k in range(int(count.max())):
        on = np.asarray(_ONSETS, dtype=object)[rng.integers(0, len(_ONSETS), n)]
        nu = np.asarray(_NUCLEI, dtype=object)[rng.integers(0, len(_NUCLEI), n)]
        co = np.asarray(_CODAS, dtype=object)[rng.integers(0, len(_CODAS), n)]
        out = np.where(count > k, out + on + nu + co, out)
    return out


def _unique(head: list[str], tail: np.ndarray, n: int) -> np.ndarray:
    """``head`` then the first distinct words of ``tail`` not in it, ``n`` in all."""
    seen = set(head)
    out = list(head)
    for w in tail.tolist():
        if len(out) >= n:
            break
        if len(w) > 1 and w not in seen:
            seen.add(w)
            out.append(w)
    return np.asarray(out, dtype=object)


@dataclass(frozen=True)
class Lexicon:
    given: np.ndarray  # given names, the real list first
    family: np.ndarray  # family names
    science: np.ndarray  # title words: the real list (common words) first, then a long tail
    science_cdf: np.ndarray  # their Zipf: about 60% of title words are from the real list


_LEXICON: list[Lexicon] = []

GIVEN_NAMES = 6_000
FAMILY_NAMES = 60_000
TITLE_WORDS = 80_000
TITLE_ZIPF = 1.15


def lexicon() -> Lexicon:
    if not _LEXICON:
        rng = np.random.default_rng(20251126)  # fixed: the same words for every dump seed
        given = _unique(GIVEN, np.char.capitalize(_words(rng, 2 * GIVEN_NAMES, (1, 4, 2)).astype(str)).astype(object),
                        GIVEN_NAMES)
        suffixes = np.asarray(["", "", "", "", "son", "sen", "ski", "ez", "ov", "ová", "ini", "er", "mann",
                               "ian", "escu", "ić", "oglu", "berg", "ley", "ton"], dtype=object)
        fam = _words(rng, 2 * FAMILY_NAMES, (2, 5, 2)) + suffixes[rng.integers(0, len(suffixes), 2 * FAMILY_NAMES)]
        family = _unique(FAMILY, np.char.capitalize(fam.astype(str)).astype(object), FAMILY_NAMES)
        science = _unique(SCIENCE, _words(rng, 2 * TITLE_WORDS, (3, 6, 2)), TITLE_WORDS)
        _LEXICON.append(Lexicon(given=given, family=family, science=science,
                                science_cdf=_zipf_cdf(len(science), TITLE_ZIPF)))
    return _LEXICON[0]
