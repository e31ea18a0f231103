"""The plan of a dump, drawn from the seed alone: every item's class, id and counts, and the
chunks.
"""

from __future__ import annotations

import math

import numpy as np

from refactx_testing.dumpgen.shape import (
    ALL_CLASSES,
    CITES_MAX,
    CITES_PARETO_ALPHA,
    CITING_SHARE,
    CLASSES,
    CLASS_INDEX,
    CORE_ITEMS,
    DEFAULT_CHUNK_LINES,
    GIANTS_PER_MILLION_LINES,
    HOSTILE_EVERY_LINES,
    HOSTILE_LINES,
    ItemClass,
    LOST_SITELINK_SHARE,
    NORMALIZED_SHARE,
    NO_VALUE_SHARE,
    OTHER_LANGS,
    SHORTDESC_SHARE,
    SKEW,
    SKEW_FACTS_PER_ITEM,
    WIKIDATA_BODY_SCALE,
    WIKIDATA_BODY_SIGMA,
    WIKIDATA_PRESETS,
    tail_properties,
)
from refactx_testing.dumpgen.basics import Plan, _line_mix, _preset, _weighted
from refactx_testing.dumpgen.render import _prelude_lines


def _draw_items(rng: np.random.Generator, n: int, cls: np.ndarray, line_mix: str,
                preset: str = "dense") -> dict[str, np.ndarray]:
    """Per-item counts for ``n`` items of classes ``cls``."""
    meta, other_mean, other_desc = _line_mix(line_mix)
    median = np.array([c.body_median for c in ALL_CLASSES])[cls]
    sigma = np.array([c.body_sigma for c in ALL_CLASSES])[cls]
    if preset in WIKIDATA_PRESETS:  # the same draws, a smaller median and a wider spread
        median, sigma = median * WIKIDATA_BODY_SCALE, sigma + WIKIDATA_BODY_SIGMA
    cap = np.array([c.body_cap for c in ALL_CLASSES])[cls]
    body = np.minimum(np.floor(median * np.exp(sigma * rng.standard_normal(n))), cap).astype(np.int32)
    is_article = cls == CLASS_INDEX["article"]
    # cites work: a third of the articles cite nothing; the rest a Pareto tail
    pareto = np.floor((1.0 - rng.random(n)) ** (-1.0 / CITES_PARETO_ALPHA) * 2.0).astype(np.int64)
    tail = np.where(is_article & (rng.random(n) < CITING_SHARE), np.minimum(pareto, CITES_MAX), 0).astype(np.int32)
    en_label = rng.random(n) < np.array([c.en_label for c in ALL_CLASSES])[cls]
    en_desc = rng.random(n) < np.array([c.en_desc for c in ALL_CLASSES])[cls]
    sitelinked = (rng.random(n) < np.array([c.sitelink for c in ALL_CLASSES])[cls]) & en_label
    shortdesc = sitelinked & (rng.random(n) < SHORTDESC_SHARE)
    n_other = rng.poisson(other_mean, n).astype(np.int16)
    n_other = np.minimum(n_other, len(OTHER_LANGS)).astype(np.int16)
    n_other_desc = rng.binomial(n_other, other_desc).astype(np.int16)
    n_alias = rng.poisson(0.3, n).astype(np.int16)
    no_value = rng.random(n) < NO_VALUE_SHARE
    return dict(n_body=body, n_tail=tail, en_label=en_label, en_desc=en_desc, sitelinked=sitelinked,
                shortdesc=shortdesc, n_other=n_other, n_other_desc=n_other_desc, n_alias=n_alias,
                no_value=no_value, meta=np.full(n, meta, dtype=np.int32))


def _expected_lines(d: dict[str, np.ndarray], cls: np.ndarray) -> np.ndarray:
    fixed = np.array([len(c.fixed) for c in ALL_CLASSES])[cls]
    ext_share = np.array([_ext_share(c) for c in ALL_CLASSES])[cls]
    lines = (d["meta"] + 3 * d["en_label"] + d["en_desc"] + 3 * d["n_other"] + d["n_other_desc"]
             + d["n_alias"] + fixed + d["n_body"] * (1.0 + ext_share * NORMALIZED_SHARE) + d["n_tail"]
             + d["no_value"])
    return lines.astype(np.float64)


def _ext_share(c: ItemClass) -> float:
    total = sum(w for _, w, _ in c.props) or 1.0
    return sum(w for _, w, spec in c.props if spec.startswith("ext:")) / total


def make_plan(lines: int, seed: int = 0, skew_facts: int = 0, line_mix: str = "dense",
              chunk_lines: int = DEFAULT_CHUNK_LINES, preset: str = "dense") -> Plan:
    """The items of a dump of about ``lines`` lines (see the module docstring). The counts do
    not depend on ``preset`` (only the rendered texts and values do), except under
    ``wikidata``, whose items have fewer statements (``shape.WIKIDATA_BODY_SCALE``)."""
    _preset(preset)
    if lines < 1000:
        raise ValueError(f"lines={lines}: at least 1,000")
    if chunk_lines < 10_000:
        raise ValueError(f"chunk_lines={chunk_lines}: at least 10,000")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    prelude = _prelude_lines(tail_properties(lines))
    budget = lines - prelude - len(HOSTILE_LINES) * max(1, lines // HOSTILE_EVERY_LINES)

    # the skew articles first: their count is fixed by skew_facts
    n_skew = math.ceil(skew_facts / SKEW_FACTS_PER_ITEM) if skew_facts > 0 else 0
    skew = _draw_items(rng, n_skew, np.full(n_skew, SKEW, dtype=np.int8), line_mix, preset)
    skew["en_label"][:] = True
    skew["en_desc"][:] = True
    skew["sitelinked"][:] = False
    skew["shortdesc"][:] = False
    skew["no_value"][:] = False
    budget -= int(_expected_lines(skew, np.full(n_skew, SKEW, dtype=np.int8)).sum())
    if budget <= 0:
        raise ValueError(f"lines={lines:,} is too few for skew_facts={skew_facts:,} "
                         f"(its {n_skew:,} articles alone take more)")

    # regular items until the line budget is spent
    shares = np.array([c.share for c in CLASSES])
    mean_lines = 30.0
    parts_cls, parts, total = [], [], 0.0
    while total < budget:
        n = max(1000, int((budget - total) / mean_lines * 1.1))
        cls = _weighted(rng, shares, n).astype(np.int8)
        d = _draw_items(rng, n, cls, line_mix, preset)
        est = _expected_lines(d, cls)
        cum = total + np.cumsum(est)
        keep = int(np.searchsorted(cum, budget, side="left")) + 1
        keep = min(keep, n)
        parts_cls.append(cls[:keep])
        parts.append({k: v[:keep] for k, v in d.items()})
        total = float(cum[keep - 1])
        mean_lines = float(est.mean())
    cls = np.concatenate(parts_cls)
    d = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    # giants: articles with thousands of citations, at least one per dump; then the last
    # items give their lines back
    # (an article cites distinct works: at most half of the dump's articles)
    max_cites = max(1, int((cls == CLASS_INDEX["article"]).sum()) // 2)
    d["n_tail"] = np.minimum(d["n_tail"], max_cites)
    articles = np.flatnonzero(cls[: len(cls) // 2] == CLASS_INDEX["article"])
    n_giants = min(len(articles), max(1, int(lines / 1e6 * GIANTS_PER_MILLION_LINES)))
    if n_giants:
        giants = rng.choice(articles, n_giants, replace=False)
        hi = max(2, min(4000, max_cites))
        d["n_tail"][giants] = rng.integers(min(1000, hi - 1), hi, n_giants)
        keep = max(len(cls) // 2, int(np.searchsorted(np.cumsum(_expected_lines(d, cls)), budget, side="right")))
        cls, d = cls[:keep], {k: v[:keep] for k, v in d.items()}

    # the skew articles go to random places among the others
    if n_skew:
        n_all = len(cls) + n_skew
        at = np.sort(rng.choice(n_all, n_skew, replace=False))
        is_skew = np.zeros(n_all, dtype=bool)
        is_skew[at] = True
        merged_cls = np.empty(n_all, dtype=np.int8)
        merged_cls[is_skew] = SKEW
        merged_cls[~is_skew] = cls
        merged = {}
        for k, v in d.items():
            m = np.empty(n_all, dtype=v.dtype)
            m[is_skew] = skew[k]
            m[~is_skew] = v
            merged[k] = m
        cls, d = merged_cls, merged

    n = len(cls)
    # ids: increasing, with gaps like deleted items; never a core item's id (gaps >= 2, +1 on a hit)
    gaps = 2 + rng.geometric(0.6, n)
    qid = 100_000 + np.cumsum(gaps)
    qid = np.where(np.isin(qid, [c.qid for c in CORE_ITEMS]), qid + 1, qid)
    # wikibase_item rows whose page is missing from the page dump (at least one)
    eligible = np.flatnonzero((~d["sitelinked"]) & d["en_label"] & (cls != SKEW))
    lost = np.zeros(n, dtype=bool)
    lost[rng.choice(eligible, min(len(eligible), max(1, int(n * LOST_SITELINK_SHARE))), replace=False)] = True

    est = _expected_lines(d, cls)
    cum = np.cumsum(est)
    bounds = np.searchsorted(cum, np.arange(chunk_lines, cum[-1], chunk_lines))
    edges = [0] + sorted(set(int(b) + 1 for b in bounds if 0 < int(b) + 1 < n)) + [n]
    chunks = list(zip(edges[:-1], edges[1:]))

    n_sets = max(1, lines // HOSTILE_EVERY_LINES)
    hostile_at: dict[int, list[str]] = {}
    for _ in range(n_sets):
        where = rng.integers(0, n, len(HOSTILE_LINES))
        for reason, item in zip(HOSTILE_LINES, where.tolist()):
            hostile_at.setdefault(int(item), []).append(reason)

    plan = Plan(seed=seed, lines=lines, skew_facts=skew_facts, line_mix=line_mix, chunk_lines=chunk_lines,
                cls=cls, qid=qid.astype(np.int64), n_body=d["n_body"], n_tail=d["n_tail"],
                en_label=d["en_label"], en_desc=d["en_desc"], sitelinked=d["sitelinked"],
                shortdesc=d["shortdesc"], lost_sitelink=lost, n_other=d["n_other"],
                n_other_desc=d["n_other_desc"], n_alias=d["n_alias"], no_value=d["no_value"],
                chunks=chunks, hostile_at=hostile_at, preset=preset)
    for code in range(len(ALL_CLASSES)):
        members = np.flatnonzero(cls == code)
        # popularity: a fixed shuffle, so the most cited are not simply the first
        plan.members[code] = members[rng.permutation(len(members))]
    return plan


# ====================================================================== rendering
