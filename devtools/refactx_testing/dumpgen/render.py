"""Rendering: one chunk of the plan into N-Triples lines (statements, labels, the property
entities' prelude), from its own random stream.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refactx_testing.dumpgen.shape import (
    ALL_CLASSES,
    ALT_LABEL,
    CATALOGS,
    CLASSES,
    CLASS_INDEX,
    CORE_ITEMS,
    CORE_PROPS,
    CoreItem,
    DATATYPES_KEPT,
    DESCRIPTION,
    DIRECT,
    ENTITY,
    ENTITY_DATA,
    FAMILY,
    GIVEN,
    HOSTILE_LINES,
    HOT_LABEL,
    INVALID_UTF8_BYTES,
    INVALID_UTF8_MARK,
    ItemClass,
    LATIN,
    LONG_CITE_LIST,
    MONTHS,
    NATIONALITY,
    NON_LATIN,
    NORMALIZED,
    NORMALIZED_SHARE,
    OTHER_LANGS,
    PLACE_PARTS,
    PREF_LABEL,
    Prop,
    RDFS_LABEL,
    RDF_TYPE,
    SCHEMA_NAME,
    SCHOLARLY_DESC,
    SCIENCE,
    SKEW,
    TAIL_DATATYPES,
    TAIL_PROPERTIES,
    TITLE_STARTS,
    TITLE_START_SHARE,
    UNKNOWN_VALUE_SHARE,
    WIKIBASE,
    XSD,
    LEXICON_PRESETS,
    STRESSED_CLASSES,
    STRESSED_FIRST_WORD_ZIPF,
    STRESSED_KEEPS_TITLE,
    STRESSED_SUBJECTS_PER_FIRST_WORD,
    WIKIDATA_COMMON_FAMILY_SHARE,
    WIKIDATA_GIVEN_HEAD,
    WIKIDATA_HOMONYM_SHARE,
    WIKIDATA_PRESETS,
    tail_properties,
)
from refactx_testing.dumpgen.lexicon import lexicon
from refactx_testing.dumpgen.basics import (
    Plan,
    _iri,
    _join,
    _line_mix,
    _objects,
    _pick_cdf,
    _weighted,
    _zipf_cdf,
    nt_literal,
)


# the realistic preset's words per generated title (lognormal mu, sigma, at least): median 3.3;
# its title words are rarer, 2-3 tokens each, and real facts average ~25-30 tokens
REALISTIC_TITLE_WORDS = (1.2, 0.5, 2)


class Lines:
    """Lines of one chunk with their sort keys: (item, group, sequence)."""

    def __init__(self) -> None:
        self.items: list[np.ndarray] = []
        self.keys: list[np.ndarray] = []
        self.texts: list[np.ndarray] = []

    def add(self, items: np.ndarray, group: int, texts: np.ndarray, seq: np.ndarray | None = None) -> None:
        if len(texts) == 0:
            return
        seq = np.zeros(len(texts), dtype=np.int64) if seq is None else seq.astype(np.int64)
        self.items.append(items.astype(np.int64))
        self.keys.append(group * 10_000_000 + seq)
        self.texts.append(texts)

    def text(self) -> str:
        items = np.concatenate(self.items)
        keys = np.concatenate(self.keys)
        texts = np.concatenate(self.texts)
        order = np.lexsort((keys, items))
        return "\n".join(texts[order].tolist()) + "\n"

    def __len__(self) -> int:
        return sum(len(t) for t in self.texts)


@dataclass
class Statements:
    """Statements of one chunk: local item index, property id, rendered object, datatype,
    the object's plan index (items among the generated ones, -1 otherwise) or core qid."""

    item: list[np.ndarray] = field(default_factory=list)
    pid: list[np.ndarray] = field(default_factory=list)
    obj: list[np.ndarray] = field(default_factory=list)
    norm: list[np.ndarray] = field(default_factory=list)  # a direct-normalized object, or ""
    dtype: list[np.ndarray] = field(default_factory=list)
    ref: list[np.ndarray] = field(default_factory=list)  # plan index of an item object, else -1
    core: list[np.ndarray] = field(default_factory=list)  # core qid of an item object, else 0
    seq: list[np.ndarray] = field(default_factory=list)
    other_lang: list[np.ndarray] = field(default_factory=list)  # a text in another language than English
    spec: list[np.ndarray] = field(default_factory=list)  # the object spec it was drawn from

    FIELDS = ("item", "pid", "obj", "dtype", "ref", "core", "norm", "seq", "other_lang", "spec")

    def add(self, item, pid, obj, dtype, ref=None, core=None, norm=None, seq=None, other_lang=None,
            spec="") -> None:
        n = len(item)
        if n == 0:
            return
        self.item.append(np.asarray(item, dtype=np.int64))
        self.pid.append(np.full(n, pid, dtype=np.int64) if np.isscalar(pid) else np.asarray(pid, dtype=np.int64))
        self.obj.append(obj)
        self.dtype.append(np.full(n, dtype, dtype=object))
        self.ref.append(np.full(n, -1, dtype=np.int64) if ref is None else ref.astype(np.int64))
        self.core.append(np.zeros(n, dtype=np.int64) if core is None else core.astype(np.int64))
        self.norm.append(np.full(n, "", dtype=object) if norm is None else norm)
        self.seq.append(np.zeros(n, dtype=np.int64) if seq is None else seq)
        self.other_lang.append(np.zeros(n, dtype=bool) if other_lang is None else other_lang)
        self.spec.append(np.full(n, spec, dtype=object))

    def concat(self) -> dict[str, np.ndarray]:
        if not self.item:
            empty = np.zeros(0, dtype=np.int64)
            return dict(item=empty, pid=empty, obj=_objects([]), dtype=_objects([]), ref=empty, core=empty,
                        norm=_objects([]), seq=empty, other_lang=np.zeros(0, dtype=bool), spec=_objects([]))
        return {k: np.concatenate(getattr(self, k)) for k in self.FIELDS}


class Vocabulary:
    """Everything derived from the constants: properties, pools, cumulative weights (cached)."""

    def __init__(self, n_tail: int = TAIL_PROPERTIES) -> None:
        self.props = {p.pid: p for p in CORE_PROPS}
        trng = np.random.default_rng(20240401)  # fixed: the same properties for every seed
        dtypes = _weighted(trng, [w for _, w in TAIL_DATATYPES], TAIL_PROPERTIES)
        pids = np.sort(trng.choice(np.arange(2000, 12000), TAIL_PROPERTIES, replace=False))
        keep = np.sort(trng.permutation(TAIL_PROPERTIES)[:n_tail])  # a smaller dump: a subset
        dtypes, pids = dtypes[keep], pids[keep]
        pids = [int(p) for p in pids if int(p) not in self.props]
        self.tail_pids: list[int] = []
        self.tail_by_type: dict[str, list[int]] = collections.defaultdict(list)
        for pid, t in zip(pids, dtypes.tolist()):
            dtype = TAIL_DATATYPES[t][0]
            name = " ".join(w.capitalize() for w in _syllable_words(trng, 1 + int(trng.integers(0, 2))))
            if dtype == "ExternalId":
                kind = ("ID", "author ID", "person ID", "species ID", "work ID", "place ID")[int(trng.integers(0, 6))]
                label, desc = f"{name} {kind}", f"identifier in the {name} database"
                norm = f"https://{name.lower().replace(' ', '')}.example.org/id/" if trng.random() < 0.4 else ""
            else:
                words = _syllable_words(trng, 2)
                label, desc, norm = " ".join(words), f"property of type {dtype}", ""
            self.props[pid] = Prop(pid, dtype, label, desc, norm)
            self.tail_pids.append(pid)
            self.tail_by_type[dtype].append(pid)
        self.tail_ext = np.array(self.tail_by_type["ExternalId"])
        self.tail_ext_cdf = _zipf_cdf(len(self.tail_ext), 1.0)
        self.tail_ext_norm = _objects([self.props[int(p)].normalized for p in self.tail_ext])
        self.tail_other = np.array([p for p in self.tail_pids if self.props[p].datatype != "ExternalId"])
        self.pools: dict[str, tuple[np.ndarray, np.ndarray, list[CoreItem]]] = {}
        for item in CORE_ITEMS:
            self.pools.setdefault(item.pool, (np.zeros(0), np.zeros(0), []))[2].append(item)
        for pool, (_, _, items) in list(self.pools.items()):
            w = np.array([i.weight for i in items])
            self.pools[pool] = (np.array([i.qid for i in items], dtype=np.int64), np.cumsum(w / w.sum()), items)
        self.core_by_qid = {c.qid: c for c in CORE_ITEMS}
        self._zipf: dict[int, np.ndarray] = {}
        self.ext_norm_fraction = _ext_norm_fraction(self)
        self.title_cdf = _zipf_cdf(len(SCIENCE), 0.6)  # title words: a flatter Zipf than names

    def zipf(self, n: int) -> np.ndarray:
        if n not in self._zipf:
            self._zipf[n] = _zipf_cdf(n, 1.05)
        return self._zipf[n]


def _syllable_words(rng: np.random.Generator, n: int) -> list[str]:
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 4))
        out.append("".join(LATIN[int(i)] for i in rng.integers(0, len(LATIN), k)))
    return out


_VOCABS: dict[int, Vocabulary] = {}


def _vocab(n_tail: int = TAIL_PROPERTIES) -> Vocabulary:
    if n_tail not in _VOCABS:
        _VOCABS[n_tail] = Vocabulary(n_tail)
    return _VOCABS[n_tail]


def _prelude_lines(n_tail: int) -> int:
    return _prelude_text(_vocab(n_tail)).count("\n")


class ChunkRenderer:
    """Renders the items [start, end) of a plan: texts, statements, lines."""

    def __init__(self, plan: Plan, chunk: int) -> None:
        self.plan, self.chunk = plan, chunk
        self.v = _vocab(tail_properties(plan.lines))
        self.start, self.end = plan.chunks[chunk]
        self.n = self.end - self.start
        self.rng = np.random.default_rng(np.random.SeedSequence([plan.seed, 1, chunk]))
        self.idx = np.arange(self.start, self.end)
        self.cls = plan.cls[self.start:self.end]
        self.label = _objects([""] * self.n)
        self.desc = _objects([""] * self.n)
        self.pub_year = self.rng.integers(1950, 2024, self.n)
        self.pub_month = self.rng.integers(1, 13, self.n)
        self.pub_day = self.rng.integers(1, 29, self.n)
        self.country = self._core("country", self.n)
        self.p31 = np.zeros(self.n, dtype=np.int64)  # the class its texts chose (0: drawn from the pool)
        self.constellation = self._core("constellation", self.n)
        self.st = Statements()
        # the word lists the texts are drawn from (shape.PRESETS); drawn after every dense
        # draw above, and the dense preset draws nothing more, so its bytes do not change
        if plan.preset in LEXICON_PRESETS:
            lex = lexicon()
            self.given, self.family, self.science_objects = lex.given, lex.family, lex.science
            self.science = lex.science
            self.title_cdf = lex.science_cdf
            self.title_mu, self.title_sigma, self.title_min = REALISTIC_TITLE_WORDS
        else:
            self.given, self.family, self.science = GIVEN, FAMILY, SCIENCE
            self.science_objects = np.array(SCIENCE, dtype=object)
            self.title_cdf = self.v.title_cdf
            self.title_mu, self.title_sigma, self.title_min = 2.0, 0.35, 3  # words in a title: median 7.4

    # ---------------------------------------------------------------- objects

    def _core(self, pool: str, n: int) -> np.ndarray:
        qids, cdf, _ = self.v.pools[pool]
        return qids[_pick_cdf(self.rng, cdf, n)]

    def _ref(self, cls_name: str, n: int) -> np.ndarray:
        """Plan indices of ``n`` items of a class, Zipf by popularity (-1 when there is none)."""
        if cls_name == "any":
            return self.rng.integers(0, self.plan.items, n) if self.plan.items else np.full(n, -1)
        code = SKEW if cls_name == "article_skew" else CLASS_INDEX[cls_name]
        members = self.plan.members[code]
        if len(members) == 0:
            return np.full(n, -1, dtype=np.int64)
        return members[_pick_cdf(self.rng, self.v.zipf(len(members)), n)]

    def objects(self, spec: str, items: np.ndarray, pid: int) -> dict[str, Any]:
        """Rendered objects of ``spec`` for local items ``items`` (one each)."""
        n, rng = len(items), self.rng
        kind, _, arg = spec.partition(":")
        if kind == "core":
            if arg.startswith("class:"):
                qids = np.where(self.p31[items] > 0, self.p31[items], self._core(arg, n))
            elif arg == "country":
                qids = self.country[items]
            elif arg == "constellation":
                qids = self.constellation[items]
            else:
                qids = self._core(arg, n)
            return dict(obj=_iri(qids), dtype="WikibaseItem", core=qids)
        if kind == "ref":
            ref = self._ref(arg, n)
            ok = ref >= 0
            ref = np.where(ok, ref, 0)
            qids = np.where(ok, self.plan.qid[ref] if len(self.plan.qid) else 0, 5)
            return dict(obj=_iri(qids), dtype="WikibaseItem", ref=np.where(ok, ref, -1),
                        core=np.where(ok, 0, 5))
        if kind == "time":
            if arg == "pub":
                y, m, d = self.pub_year[items], self.pub_month[items], self.pub_day[items]
            elif arg == "birth":
                y = rng.integers(1700, 2005, n)
                m, d = rng.integers(1, 13, n), rng.integers(1, 29, n)
            elif arg == "death":
                y = rng.integers(1750, 2024, n)
                m, d = rng.integers(1, 13, n), rng.integers(1, 29, n)
            else:  # year precision: month and day 01, as the dumps write it
                y = rng.integers(1800, 2024, n)
                m, d = np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64)
            texts = [f'"+{a:04d}-{b:02d}-{c:02d}T00:00:00Z"^^<{XSD}dateTime>'
                     for a, b, c in zip(y.tolist(), m.tolist(), d.tolist())]
            return dict(obj=_objects(texts), dtype="Time")
        if kind == "qty":
            if arg == "population":
                vals = [f"+{v}" for v in np.floor(np.exp(rng.normal(7.0, 2.0, n))).astype(np.int64).tolist()]
            elif arg == "elevation":
                vals = [f"+{v}" for v in rng.integers(0, 3000, n).tolist()]
            elif arg == "area":
                vals = [f"+{v:.2f}" for v in np.exp(rng.normal(3.0, 1.5, n)).tolist()]
            elif arg == "angle":
                vals = [f"+{v:.6f}" for v in rng.uniform(0, 360, n).tolist()]
            else:  # magnitude
                vals = [f"{v:+.2f}" for v in rng.normal(11.0, 3.0, n).tolist()]
            return dict(obj=_objects([f'"{v}"^^<{XSD}decimal>' for v in vals]), dtype="Quantity")
        if kind == "coord":
            lat, lon = rng.uniform(-60, 70, n), rng.uniform(-170, 170, n)
            texts = [f'"Point({a:.4f} {b:.4f})"^^<http://www.opengis.net/ont/geosparql#wktLiteral>'
                     for a, b in zip(lon.tolist(), lat.tolist())]
            return dict(obj=_objects(texts), dtype="GlobeCoordinate")
        if kind == "str":
            return dict(obj=nt_literal(self._strings(arg, items, n)), dtype="String")
        if kind == "mono":
            if arg == "title":
                texts, langs = self.label[items].tolist(), ["en"] * n
            else:
                texts = self.label[items].tolist()
                langs = [("en", "de", "fr", "es")[i] for i in rng.integers(0, 4, n).tolist()]
            lits = nt_literal([t or "untitled" for t in texts])
            return dict(obj=_objects([f"{t}@{lang}" for t, lang in zip(lits.tolist(), langs)]),
                        dtype="Monolingualtext", other_lang=np.array([lang != "en" for lang in langs]))
        if kind == "ext":
            values = self._ids(arg, n)
            prop = self.v.props[pid]
            norm = None
            if prop.normalized:
                has = rng.random(n) < NORMALIZED_SHARE / max(self.v.ext_norm_fraction, 1e-9)
                norm = _objects([f"<{prop.normalized}{v}>" if h else "" for v, h in zip(values, has.tolist())])
            return dict(obj=nt_literal(values), dtype="ExternalId", norm=norm)
        if kind == "url":
            words = rng.integers(0, len(self.family), n)
            return dict(obj=_objects([f"<https://www.{self.family[w].lower().replace(chr(39), '')}{i}.example.com/>"
                                      for w, i in zip(words.tolist(), rng.integers(1, 999, n).tolist())]),
                        dtype="Url")
        if kind == "commons":
            words = rng.integers(0, len(self.science), n)
            return dict(obj=_objects([f"<http://commons.wikimedia.org/wiki/Special:FilePath/{self.science[w]}%20{i}.jpg>"
                                      for w, i in zip(words.tolist(), rng.integers(1, 99999, n).tolist())]),
                        dtype="CommonsMedia")
        raise ValueError(f"object spec {spec!r}")

    def _strings(self, style: str, items: np.ndarray, n: int) -> list[str]:
        rng = self.rng
        if style == "author":
            g = rng.integers(0, len(self.given), n)
            f = rng.integers(0, len(self.family), n)
            return [f"{self.given[a]} {self.family[b]}" if i % 3 else f"{self.given[a][0]}. {self.family[b]}"
                    for i, (a, b) in enumerate(zip(g.tolist(), f.tolist()))]
        if style == "volume":
            return list(map(str, rng.integers(1, 120, n).tolist()))
        if style == "issue":
            return list(map(str, rng.integers(1, 13, n).tolist()))
        if style == "pages":
            first = rng.integers(1, 3000, n)
            return [f"{a}-{a + b}" for a, b in zip(first.tolist(), rng.integers(2, 30, n).tolist())]
        if style == "taxon":
            return self.label[items].tolist()
        if style == "catalog":
            cat = rng.integers(0, len(CATALOGS), n)
            return [f"{CATALOGS[c]} {v}" for c, v in zip(cat.tolist(), rng.integers(1, 999999, n).tolist())]
        if style == "postal":
            return list(map(str, rng.integers(10000, 99999, n).tolist()))
        if style == "commonscat":
            return [t or "Unnamed" for t in self.label[items].tolist()]
        raise ValueError(f"string style {style!r}")

    def _ids(self, style: str, n: int) -> list[str]:
        rng = self.rng
        num = rng.integers(1, 10**9, n).tolist()
        if style == "doi":
            return [f"10.{1000 + a % 9000}/{self.science[a % len(self.science)][:4].upper()}.{a}" for a in num]
        if style == "pmid" or style == "num":
            return list(map(str, num))
        if style == "openalex":
            return [f"W{a % 5_000_000_000}" for a in num]
        if style == "pmc":
            return [f"PMC{a % 10_000_000}" for a in num]
        if style == "orcid":
            return [f"0000-000{a % 3 + 1}-{a // 10000 % 10000:04d}-{a % 10000:04d}" for a in num]
        if style == "isni":
            return [f"0000 0001 {a // 10000 % 10000:04d} {a % 10000:04d}" for a in num]
        if style == "gnd":
            return [f"{a % 200_000_000}{'X' if a % 11 == 0 else a % 10}" for a in num]
        if style == "loc":
            return [f"n{80 + a % 20}0{a % 100000:05d}" for a in num]
        if style == "freebase":
            return [f"/m/0{np.base_repr(a, 36).lower()}" for a in num]
        if style == "ensembl":
            return [f"ENSG{a % 100_000_000_000:011d}" for a in num]
        if style == "uniprot":
            return [f"{'OPQ'[a % 3]}{a % 10}{np.base_repr(a % 36**3, 36):0>3}{a % 10}" for a in num]
        if style == "issn":
            return [f"{a % 10000:04d}-{a // 10000 % 10000:04d}" for a in num]
        if style == "alnum":
            return [f"{chr(65 + a % 26)}-{a % 10000:04d}-{2000 + a % 24}" for a in num]
        raise ValueError(f"id style {style!r}")

    # ---------------------------------------------------------------- texts

    def texts(self) -> None:
        """English labels and descriptions per item, by class."""
        for code, c in enumerate(ALL_CLASSES):
            at = np.flatnonzero(self.cls == code)
            if len(at):
                labels, descs = getattr(self, "_text_" + c.name)(at, len(at))
                self.label[at] = labels
                self.desc[at] = descs
        if self.plan.preset in WIKIDATA_PRESETS:
            self._wikidata_labels()

    def _wikidata_labels(self) -> None:
        """The wikidata preset's labels, drawn after every other draw (the texts above stay
        those of realistic): human names share their first word (a given name, Zipf over the
        head of the list) and differ after it (a family name, uniform over tens of thousands);
        a share of each class's items take another item's label (homonyms, told apart by the
        labels stage)."""
        rng = self.rng
        stressed = self.plan.preset == "wikidata-stressed"
        humans = np.flatnonzero(self.cls == CLASS_INDEX["human"])
        if len(humans):
            if stressed:  # the same draws: a first word per STRESSED_SUBJECTS_PER_FIRST_WORD humans
                given_cdf = self._stressed_first_words(["human"], len(self.given))
            else:
                given_cdf = _zipf_cdf(min(WIKIDATA_GIVEN_HEAD, len(self.given)), 1.1)
            g = _pick_cdf(rng, given_cdf, len(humans)).tolist()
            common = _pick_cdf(rng, _zipf_cdf(len(FAMILY), 1.0), len(humans))
            rare = rng.integers(0, len(self.family), len(humans))
            common_share = 0.0 if stressed else WIKIDATA_COMMON_FAMILY_SHARE
            f = np.where(rng.random(len(humans)) < common_share, common, rare).tolist()
            self.label[humans] = [f"{self.given[a]} {self.family[b]}" for a, b in zip(g, f)]
        if stressed:
            self._stressed_labels()
        for code in range(len(ALL_CLASSES)):
            at = np.flatnonzero(self.cls == code)
            if len(at) < 2:
                continue
            takes = at[rng.random(len(at)) < WIKIDATA_HOMONYM_SHARE]
            if len(takes):
                self.label[takes] = self.label[at[_pick_cdf(rng, self.v.zipf(len(at)), len(takes))]]

    def _stressed_first_words(self, classes: list[str], words: int) -> np.ndarray:
        """The Zipf CDF of the first words of ``classes``' labels in the wikidata-stressed preset:
        one word per STRESSED_SUBJECTS_PER_FIRST_WORD of their items in the whole plan (not
        this chunk's), at most ``words``."""
        subjects = int(np.isin(self.plan.cls, [CLASS_INDEX[c] for c in classes]).sum())
        return _zipf_cdf(max(1, min(words, round(subjects / STRESSED_SUBJECTS_PER_FIRST_WORD))),
                         STRESSED_FIRST_WORD_ZIPF)

    def _stressed_labels(self) -> None:
        """The wikidata-stressed preset's labels of STRESSED_CLASSES (drawn after the humans',
        before the homonyms): a title word (:meth:`_stressed_first_words`), then a family name or
        a title word drawn evenly, then (STRESSED_KEEPS_TITLE) the title's own words."""
        rng = self.rng
        cdf = self._stressed_first_words(list(STRESSED_CLASSES), len(self.science))
        first = np.char.capitalize(self.science[:len(cdf)].astype(str)).astype(object)
        # the second word: a family name or a title word (6,489 distinct first Qwen2.5 tokens
        # between them, against 2,658 of the family names alone: fewer subjects share one)
        second = np.concatenate([self.family, self.science])
        for name in STRESSED_CLASSES:
            at = np.flatnonzero(self.cls == CLASS_INDEX[name])
            if not len(at):
                continue
            a = _pick_cdf(rng, cdf, len(at)).tolist()
            b = rng.integers(0, len(second), len(at)).tolist()
            keep = name in STRESSED_KEEPS_TITLE
            self.label[at] = [f"{first[x]} {second[y]}" + (f" {old[:1].lower()}{old[1:]}" if keep else "")
                              for x, y, old in zip(a, b, self.label[at].tolist())]

    def _date_words(self, at: np.ndarray) -> list[str]:
        return [f"{d} {MONTHS[m - 1]} {y}" for y, m, d in
                zip(self.pub_year[at].tolist(), self.pub_month[at].tolist(), self.pub_day[at].tolist())]

    def _title(self, n: int, starts: bool = True) -> list[str]:
        rng = self.rng
        k = np.clip(np.round(rng.lognormal(self.title_mu, self.title_sigma, n)).astype(np.int64), self.title_min, 24)
        words = self.science_objects[_pick_cdf(rng, self.title_cdf, n * 24).reshape(n, 24)]
        body = _join(words, k)
        if not starts:
            return [b[:1].upper() + b[1:] for b in body]
        start = _pick_cdf(rng, _zipf_cdf(len(TITLE_STARTS), 1.0), n)
        use = rng.random(n) < TITLE_START_SHARE
        return [f"{TITLE_STARTS[s]} {b}" if u else b[:1].upper() + b[1:]
                for s, b, u in zip(start.tolist(), body, use.tolist())]

    def _text_article(self, at, n):
        dates = self._date_words(at)
        style = self.rng.random(n)
        fam = self.rng.integers(0, len(self.family), n).tolist()
        descs = [f"scientific article published on {d}" if s < 0.6 else
                 f"scholarly article by {self.family[f]} et al published {d}" if s < 0.75 else
                 f"scientific article published in {d.split(' ', 1)[1]}" if s < 0.9 else "scientific article"
                 for d, s, f in zip(dates, style.tolist(), fam)]
        return self._title(n), descs

    def _text_skew(self, at, n):
        # unique by construction: a gene-like symbol from the item's plan index
        idx = (self.idx[at] * 2654435761 % 2**32).tolist()
        symbols = [f"{chr(65 + i % 26)}{chr(65 + i // 26 % 26)}{chr(65 + i // 676 % 26)}{i // 17576 % 1000}"
                   for i in idx]
        bodies = self._title(n, starts=False)
        labels = [f"{HOT_LABEL} {s} {b[:1].lower()}{b[1:]}" for s, b in zip(symbols, bodies)]
        return labels, [f"scientific article published on {d}" for d in self._date_words(at)]

    def _text_human(self, at, n):
        rng = self.rng
        g = rng.integers(0, len(self.given), n).tolist()
        f = _pick_cdf(rng, self.v.zipf(len(self.family)), n).tolist()
        mid = rng.random(n) < 0.15
        labels = [f"{self.given[a]} {chr(65 + (a * 7 + b) % 26)}. {self.family[b]}" if m else f"{self.given[a]} {self.family[b]}"
                  for a, b, m in zip(g, f, mid.tolist())]
        occ = self._core("occupation", n)
        nat = [NATIONALITY.get(int(q), "") for q in self.country[at].tolist()]
        occ_label = [self.v.core_by_qid[int(q)].label for q in occ.tolist()]
        style = rng.random(n).tolist()
        years = rng.integers(1850, 2000, n).tolist()
        descs = ["researcher" if s < 0.2 else f"{a} {o}" if s < 0.8 else f"{a} {o} (born {y})"
                 for s, a, o, y in zip(style, nat, occ_label, years)]
        return labels, descs

    def _text_taxon(self, at, n):
        rng = self.rng
        genus = _pick_cdf(rng, self.v.zipf(4000), n)
        genus_names = [_latin_word(g, 3).capitalize() for g in genus.tolist()]
        species = [_latin_word(s, 3) for s in rng.integers(0, 10**6, n).tolist()]
        kinds = ("insect", "plant", "fungus", "beetle", "moth", "bird", "fish", "bacteria")
        k = _pick_cdf(rng, _zipf_cdf(len(kinds), 1.0), n).tolist()
        return [f"{a} {b}" for a, b in zip(genus_names, species)], [f"species of {kinds[i]}" for i in k]

    def _text_category(self, at, n):
        body = self._title(n, starts=False)
        return [f"Category:{b}" for b in body], ["Wikimedia category"] * n

    def _text_gene(self, at, n):
        rng = self.rng
        sym = [f"{_latin_word(i, 2).upper()}{j}" for i, j in
               zip(rng.integers(0, 10**5, n).tolist(), rng.integers(1, 30, n).tolist())]
        unchar = rng.random(n) < 0.3
        org = self._core("organism", n)
        org_label = [self.v.core_by_qid[int(q)].label for q in org.tolist()]
        self.p31[at] = np.where(unchar, 8054, 7187)
        labels = ["uncharacterized protein" if u else s for s, u in zip(sym, unchar.tolist())]
        descs = [f"microbial protein found in {o}" if u else f"protein-coding gene in the species {o}"
                 for o, u in zip(org_label, unchar.tolist())]
        return labels, descs

    def _text_astro(self, at, n):
        rng = self.rng
        cat = _pick_cdf(rng, _zipf_cdf(len(CATALOGS), 0.8), n).tolist()
        num = rng.integers(1, 10**6, n).tolist()
        labels = [f"{CATALOGS[c]}{'' if CATALOGS[c].endswith('J') else ' '}{v}" for c, v in zip(cat, num)]
        con = self.constellation[at]
        kinds = ("star", "galaxy", "asteroid")
        k = _weighted(rng, (5, 3, 2), n)
        self.p31[at] = np.array([523, 318, 3863])[k]
        descs = [f"{kinds[i]} in the constellation {self.v.core_by_qid[int(q)].label}" if i < 2 else "asteroid"
                 for i, q in zip(k.tolist(), con.tolist())]
        return labels, descs

    def _text_place(self, at, n):
        rng = self.rng
        a = rng.integers(0, len(PLACE_PARTS), n).tolist()
        b = rng.integers(0, 10**5, n).tolist()
        labels = [f"{PLACE_PARTS[x]} {_latin_word(y, 2).capitalize()}" if y % 3 else _latin_word(y, 3).capitalize()
                  for x, y in zip(a, b)]
        country = [self.v.core_by_qid[int(q)].label for q in self.country[at].tolist()]
        kinds = ("village", "human settlement", "city", "commune", "town")
        k = _pick_cdf(rng, _zipf_cdf(len(kinds), 1.0), n).tolist()
        self.p31[at] = np.array([532, 486972, 515, 486972, 486972])[k]
        return labels, [f"{kinds[i]} in {c}" for i, c in zip(k, country)]

    def _text_work(self, at, n):
        rng = self.rng
        body = self._title(n, starts=False)
        labels = [" ".join(b.split()[:1 + i % 4]).title() for i, b in enumerate(body)]
        g = rng.integers(0, len(self.given), n).tolist()
        f = rng.integers(0, len(self.family), n).tolist()
        kinds = ("film", "album", "painting", "novel")
        k = rng.integers(0, 4, n).tolist()
        self.p31[at] = np.array([11424, 482994, 3305213, 7725634])[k]
        descs = [f"{y} {kinds[i]} by {self.given[a]} {self.family[b]}" if i != 1 else f"album by {self.given[a]} {self.family[b]}"
                 for y, i, a, b in zip(self.pub_year[at].tolist(), k, g, f)]
        return labels, descs

    def _text_disambiguation(self, at, n):
        f = _pick_cdf(self.rng, self.v.zipf(len(self.family)), n).tolist()
        return [self.family[i] for i in f], ["Wikimedia disambiguation page"] * n

    def _text_journal(self, at, n):
        body = self._title(n, starts=False)
        labels = ["Journal of " + " ".join(b.split()[:2]).title() for b in body]
        return labels, ["scientific journal"] * n

    def _text_misc(self, at, n):
        rng = self.rng
        style = rng.random(n).tolist()
        fam = _pick_cdf(rng, self.v.zipf(len(self.family)), n).tolist()
        giv = rng.integers(0, len(self.given), n).tolist()
        body = self._title(n, starts=False)
        labels, descs, p31 = [], [], []
        for s, f, g, b, c in zip(style, fam, giv, body, self.country[at].tolist()):
            if s < 0.25:
                labels.append(self.family[f]); descs.append("family name"); p31.append(101352)
            elif s < 0.4:
                labels.append(self.given[g]); descs.append("male given name"); p31.append(12308941)
            elif s < 0.6:
                labels.append(f"{self.family[f]} Street"); descs.append(f"street in {self.v.core_by_qid[c].label}")
                p31.append(79007)
            elif s < 0.7:
                words = b.split()[:2]
                labels.append(" ".join(words).title() + " Building")
                descs.append(f"building in {self.v.core_by_qid[c].label}"); p31.append(41176)
            else:
                words = b.split()[:2 + f % 3]
                labels.append(" ".join(words).title())
                descs.append(f"organization in {self.v.core_by_qid[c].label}"); p31.append(43229)
        self.p31[at] = p31
        return labels, descs

    # ---------------------------------------------------------------- statements

    def statements(self) -> None:
        plan, rng = self.plan, self.rng
        for code, c in enumerate(ALL_CLASSES):
            at = np.flatnonzero(self.cls == code)
            if not len(at):
                continue
            seq0 = 0
            for pid, spec in c.fixed:
                self._add(at, pid, spec, np.full(len(at), seq0))
                seq0 += 1
            # body: n_body statements each, properties by weight
            nb = plan.n_body[self.start:self.end][at]
            owners = np.repeat(at, nb)
            if len(owners) and c.props:
                seqs = seq0 + _ranks(np.repeat(np.arange(len(at)), nb))
                which = _weighted(rng, [w for _, w, _ in c.props], len(owners))
                which = _single_valued_once(owners, which, c)
                for j, (pid, _, spec) in enumerate(c.props):
                    sel = which == j
                    if not sel.any():
                        continue
                    items = owners[sel]
                    if pid == 0 or spec == "ext:tail":
                        self._tail_statements(items, seqs[sel])
                        continue
                    self._add(items, pid, spec, seqs[sel])
            # articles: cites work, by popularity; a long list is a sample of distinct works
            nt = plan.n_tail[self.start:self.end][at]
            short = nt <= LONG_CITE_LIST
            cites = np.repeat(at[short], nt[short])
            if len(cites):
                self._add(cites, 2860, "ref:article", 100_000 + _ranks(cites))
            for item, k in zip(at[~short].tolist(), nt[~short].tolist()):
                members = plan.members[CLASS_INDEX["article"]]
                ref = rng.choice(members, min(k, len(members)), replace=False)
                self.st.add(np.full(len(ref), item), 2860, _iri(plan.qid[ref]), "WikibaseItem", ref=ref,
                            seq=100_000 + np.arange(len(ref)), spec="ref:article")

    def _add(self, items: np.ndarray, pid: int, spec: str, seq: np.ndarray) -> None:
        o = self.objects(spec, items, pid)
        self.st.add(items, pid, o["obj"], o["dtype"], o.get("ref"), o.get("core"), o.get("norm"), seq,
                    o.get("other_lang"), spec)

    def _distinct(self, st: dict[str, np.ndarray], rounds: int = 4) -> dict[str, np.ndarray]:
        """The statements without repeats: a truthy dump is a set of triples. An object drawn
        twice for one item and property (a hot value, a popular cited work) is drawn again, a
        few times; what still repeats is dropped."""
        for _ in range(rounds):
            repeat = np.flatnonzero(_repeats(st))
            if not len(repeat):
                return st
            keys = sorted(set(zip(st["spec"][repeat].tolist(), st["pid"][repeat].tolist())))
            for spec, pid in keys:
                at = repeat[(st["spec"][repeat] == spec) & (st["pid"][repeat] == pid)]
                o = self.objects(spec, st["item"][at], pid)
                st["obj"][at] = o["obj"]
                for name, default in (("ref", -1), ("core", 0), ("norm", ""), ("other_lang", False)):
                    value = o.get(name)
                    st[name][at] = default if value is None else value
        keep = ~_repeats(st)
        return {k: v[keep] for k, v in st.items()}

    def _tail_statements(self, items: np.ndarray, seqs: np.ndarray) -> None:
        """Statements of the long tail of properties: mostly external ids from many catalogues."""
        rng, v = self.rng, self.v
        n = len(items)
        is_ext = rng.random(n) < 0.92
        ext_items, ext_seq = items[is_ext], seqs[is_ext]
        which = _pick_cdf(rng, v.tail_ext_cdf, len(ext_items))
        values = self._ids("num", len(ext_items))
        prefix = v.tail_ext_norm[which]
        has = (rng.random(len(ext_items)) < NORMALIZED_SHARE / max(v.ext_norm_fraction, 1e-9)) & (prefix != "")
        norm = np.where(has, "<" + prefix + _objects(values) + ">", "")
        self.st.add(ext_items, v.tail_ext[which], nt_literal(values), "ExternalId", norm=norm, seq=ext_seq,
                    spec="ext:num")
        other_items, other_seq = items[~is_ext], seqs[~is_ext]
        if len(other_items) and len(v.tail_other):
            pids = v.tail_other[rng.integers(0, len(v.tail_other), len(other_items))]
            for pid in np.unique(pids).tolist():
                sel = pids == pid
                spec = {"String": "str:catalog", "Quantity": "qty:area", "WikibaseItem": "ref:any",
                        "Time": "time:year", "Url": "url"}[v.props[pid].datatype]
                self._add(other_items[sel], pid, spec, other_seq[sel])

    # ---------------------------------------------------------------- lines

    def render(self) -> tuple[bytes, dict[str, Any]]:
        plan, rng = self.plan, self.rng
        self.texts()
        self.statements()
        st = self._distinct(self.st.concat())
        sl = slice(self.start, self.end)
        subj = _iri(plan.qid[sl])
        out = Lines()
        local = np.arange(self.n)
        meta_lines = _line_mix(plan.line_mix)[0]

        # metadata and type
        if meta_lines > 1:
            data_iri = _objects([f"<{ENTITY_DATA}Q{q}>" for q in plan.qid[sl].tolist()])
            version = rng.integers(10**8, 2 * 10**9, self.n).tolist()
            n_st = np.bincount(st["item"], minlength=self.n)
            n_ext = np.bincount(st["item"][st["dtype"] == "ExternalId"], minlength=self.n)
            n_sl = np.where(plan.sitelinked[sl], rng.integers(1, 60, self.n), rng.integers(0, 2, self.n))
            days = rng.integers(0, 365, self.n).tolist()
            meta = [
                data_iri + f" {RDF_TYPE} <http://schema.org/Dataset> .",
                data_iri + " <http://schema.org/about> " + subj + " .",
                data_iri + " <http://creativecommons.org/ns#license> <http://creativecommons.org/publicdomain/zero/1.0/> .",
                data_iri + ' <http://schema.org/softwareVersion> "1.0.0" .',
                data_iri + _objects([f' <http://schema.org/version> "{v}"^^<{XSD}integer> .' for v in version]),
                data_iri + _objects([f' <http://schema.org/dateModified> "2023-{1 + d // 31:02d}-{1 + d % 28:02d}T'
                                     f'{d % 24:02d}:{d % 60:02d}:{(d * 7) % 60:02d}Z"^^<{XSD}dateTime> .' for d in days]),
                data_iri + _objects([f' <{WIKIBASE}identifiers> "{v}"^^<{XSD}integer> .' for v in n_ext.tolist()]),
                data_iri + _objects([f' <{WIKIBASE}sitelinks> "{v}"^^<{XSD}integer> .' for v in n_sl.tolist()]),
                data_iri + _objects([f' <{WIKIBASE}statements> "{v}"^^<{XSD}integer> .' for v in n_st.tolist()]),
            ]
            for j, texts in enumerate(meta):
                out.add(local, 0, texts, np.full(self.n, j))
        out.add(local, 1, subj + f" {RDF_TYPE} <{WIKIBASE}Item> .")

        # English terms
        has = plan.en_label[sl]
        lab = nt_literal(self.label[has].tolist())
        for j, pred in enumerate((RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)):
            out.add(local[has], 2, subj[has] + f" {pred} " + lab + "@en .", np.full(int(has.sum()), j))
        hasd = plan.en_desc[sl]
        out.add(local[hasd], 4, subj[hasd] + f" {DESCRIPTION} " + nt_literal(self.desc[hasd].tolist()) + "@en .")
        na = plan.n_alias[sl]
        owners = np.repeat(local, na)
        if len(owners):
            alias = [_alias(t, k) for t, k in zip(self.label[owners].tolist(), _ranks(owners).tolist())]
            out.add(owners, 5, subj[owners] + f" {ALT_LABEL} " + nt_literal(alias) + "@en .", _ranks(owners))

        # other languages: label (x3) and some descriptions
        no = plan.n_other[sl].astype(np.int64)
        owners = np.repeat(local, no)
        if len(owners):
            rank = _ranks(owners)
            first = rng.integers(0, len(OTHER_LANGS), self.n)[owners]
            lang_idx = (first + rank * 7) % len(OTHER_LANGS)  # distinct per item (7 is prime to 28)
            langs = [OTHER_LANGS[i] for i in lang_idx.tolist()]
            texts = [_translate(t or "x", lang) for t, lang in zip(self.label[owners].tolist(), langs)]
            lits = nt_literal(texts)
            tagged = lits + _objects(["@" + lang + " ." for lang in langs])
            for j, pred in enumerate((RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)):
                out.add(owners, 3, subj[owners] + f" {pred} " + tagged, 1 + rank * 4 + j)
            nd = plan.n_other_desc[sl].astype(np.int64)
            has_desc = rank < nd[owners]
            d_owners = owners[has_desc]
            d_langs = [lang for lang, h in zip(langs, has_desc.tolist()) if h]
            d_texts = [SCHOLARLY_DESC.get(lang, d) if c in (CLASS_INDEX["article"], SKEW) else
                       _translate(d, lang) for lang, d, c in
                       zip(d_langs, self.desc[d_owners].tolist(), self.cls[d_owners].tolist())]
            out.add(d_owners, 4, subj[d_owners] + f" {DESCRIPTION} " + nt_literal(d_texts)
                    + _objects(["@" + lang + " ." for lang in d_langs]), 1 + rank[has_desc])

        # statements (an unknown value now and then), their direct-normalized lines
        unknown = rng.random(len(st["item"])) < UNKNOWN_VALUE_SHARE
        unknown &= st["pid"] != 31
        st_obj = st["obj"].copy()
        genid = _objects([f"<http://www.wikidata.org/.well-known/genid/{h:032x}>"
                          for h in rng.integers(0, 2**62, int(unknown.sum())).tolist()])
        st_obj[unknown] = genid
        pred = _objects([f" <{DIRECT}P{p}> " for p in st["pid"].tolist()])
        out.add(st["item"], 6, subj[st["item"]] + pred + st_obj + " .", st["seq"] * 2)
        has_norm = (st["norm"] != "") & ~unknown
        if has_norm.any():
            npred = _objects([f" <{NORMALIZED}P{p}> " for p in st["pid"][has_norm].tolist()])
            out.add(st["item"][has_norm], 6, subj[st["item"][has_norm]] + npred + st["norm"][has_norm] + " .",
                    st["seq"][has_norm] * 2 + 1)
        nov = plan.no_value[sl]
        out.add(local[nov], 7, subj[nov] + f" {RDF_TYPE} <http://www.wikidata.org/prop/novalue/P570> .")

        # hostile lines after their item
        hostile: collections.Counter[str] = collections.Counter()
        for item in sorted(k for k in plan.hostile_at if self.start <= k < self.end):
            for reason in plan.hostile_at[item]:
                line = HOSTILE_LINES[reason].replace("{s}", subj[item - self.start])
                out.add(np.array([item - self.start]), 8, _objects([line]), np.array([len(hostile)]))
                hostile[reason] += 1

        text = out.text()
        data = text.encode("utf-8")
        if hostile.get("invalid_utf8"):
            data = data.replace(INVALID_UTF8_MARK, INVALID_UTF8_BYTES)

        # what the pipeline's default configuration (English, default datatypes) keeps
        disp = plan.displayable()
        kept_dtype = np.isin(st["dtype"], DATATYPES_KEPT)
        # monolingual texts in another language are skipped by the parse stage
        other_lang = st["other_lang"]
        subj_ok = disp[self.start + st["item"]]
        obj_ok = np.where(st["ref"] >= 0, disp[np.maximum(st["ref"], 0)], True)
        kept = kept_dtype & ~other_lang & ~unknown & subj_ok & obj_ok
        seen = ~unknown & ~other_lang
        by_dtype = collections.Counter(st["dtype"][~unknown].tolist())
        filtered = collections.Counter(st["dtype"][seen & ~kept_dtype].tolist())
        sitelinked = np.flatnonzero(plan.sitelinked[sl] | plan.lost_sitelink[sl])
        info = {
            "chunk": self.chunk,
            "lines": len(out),
            "bytes": len(data),
            "statements": int(seen.sum()),
            "statements_by_datatype": dict(by_dtype),
            "filtered_by_datatype": dict(filtered),
            "unknown_value": int(unknown.sum()),
            "no_value": int(nov.sum()),
            "hostile": dict(hostile),
            "kept_statements": int(kept.sum()),
            "kept_subjects": np.unique(self.start + st["item"][kept]),
            "kept_ref_objects": np.unique(st["ref"][kept & (st["ref"] >= 0)]),
            "kept_core_objects": np.unique(st["core"][kept & (st["core"] > 0)]),
            "stmts_per_item": np.bincount(st["item"][~unknown], minlength=self.n),
            "sitelink_items": self.start + sitelinked,
            "sitelink_labels": self.label[sitelinked].tolist(),
            "sitelink_descs": self.desc[sitelinked].tolist(),
        }
        return data, info


# properties an item has at most one value of (a second draw becomes a long-tail statement)
SINGLE_VALUED = frozenset({21, 569, 570, 577, 571, 625, 1082, 2044, 2046, 6257, 6258, 1215, 478, 433, 304,
                           281, 225, 105, 1476, 356, 698, 932, 10283, 4011, 8608, 6366, 59, 236, 373})


def _single_valued_once(owners: np.ndarray, which: np.ndarray, c: ItemClass) -> np.ndarray:
    """``which`` (a property index per body slot of ``owners``) with every repeat of a
    single-valued property of an item moved to the class's long tail."""
    tail = [j for j, (pid, _, spec) in enumerate(c.props) if pid == 0]
    single = np.array([pid in SINGLE_VALUED for pid, _, _ in c.props])
    if not tail or not single.any():
        return which
    order = np.lexsort((which, owners))
    o, w = owners[order], which[order]
    again = np.r_[False, (o[1:] == o[:-1]) & (w[1:] == w[:-1])] & single[w]
    which = which.copy()
    which[order[again]] = tail[0]
    return which


def _repeats(st: dict[str, np.ndarray]) -> np.ndarray:
    """Statements equal to an earlier one of the same item (same property and object)."""
    n = len(st["item"])
    repeat = np.zeros(n, dtype=bool)
    if n == 0:
        return repeat
    codes = np.unique(st["obj"], return_inverse=True)[1].reshape(-1)
    order = np.lexsort((st["seq"], codes, st["pid"], st["item"]))
    a, b, c = st["item"][order], st["pid"][order], codes[order]
    repeat[order[1:][(a[1:] == a[:-1]) & (b[1:] == b[:-1]) & (c[1:] == c[:-1])]] = True
    return repeat


def _ranks(owners: np.ndarray) -> np.ndarray:
    """0, 1, 2... within each run of equal values of a sorted-by-run array."""
    n = len(owners)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(owners[1:] != owners[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n) - run_start


def _latin_word(seed: int, syllables: int) -> str:
    out, x = [], seed
    for _ in range(syllables):
        out.append(LATIN[x % len(LATIN)])
        x = x // len(LATIN) + 7 * (x % 13)
    return "".join(out)


_TRANSLIT = str.maketrans("abcdefghijklmnopqrstuvwxyz", "абцдефгхийклмнопqрстуввxыз")


def _translate(text: str, lang: str) -> str:
    """A stand-in for a label in another language: Latin-script languages mostly keep the
    English text (names and titles do), others get characters of their script."""
    base = NON_LATIN.get(lang)
    if base is None:
        return text
    if lang in ("ru", "uk"):
        return text.lower().translate(_TRANSLIT)
    h = sum(map(ord, text))
    if lang == "zh" and h % 7 == 0:  # now and then a character beyond the BMP (CJK extension B)
        return chr(0x20000 + h % 4000) + "".join(chr(base + (h * (i + 3) + ord(ch)) % 80)
                                                 for i, ch in enumerate(text[:6]) if ch != " ")
    return "".join(chr(base + (h * (i + 3) + ord(ch)) % 80) for i, ch in enumerate(text[:12]) if ch != " ")


def _alias(label: str, k: int) -> str:
    words = label.split()
    if len(words) > 2 and k == 0:
        return " ".join(w[0] for w in words if w[:1].isalpha()).upper()
    if k == 1 and len(label) % 5 == 0:  # an emoji now and then, as in real aliases (flags...)
        return label + " \U0001F3F3\uFE0F"
    return (label.lower() if k % 2 == 0 else label.upper()) or "alias"


def _ext_norm_fraction(v: Vocabulary) -> float:
    """Share of external-id statements whose property has a normalized form (weights of CLASSES)."""
    num = den = 0.0
    for c in CLASSES:
        total = sum(w for _, w, _ in c.props) or 1.0
        for pid, w, spec in c.props:
            if spec == "ext:tail":
                frac = np.mean([1.0 if v.props[int(p)].normalized else 0.0 for p in v.tail_ext])
                num += c.share * w / total * 0.92 * frac
                den += c.share * w / total * 0.92
            elif spec.startswith("ext:"):
                num += c.share * w / total * (1.0 if v.props[pid].normalized else 0.0)
                den += c.share * w / total
    return num / den if den else 1.0


# ====================================================================== prelude


# statements of the core items in the dump's head (subclass of entity: unlabelled, never a fact)
PRELUDE_STATEMENTS = sum(1 for c in CORE_ITEMS if c.pool.startswith("class:"))


def _prelude_text(v: Vocabulary) -> str:
    """The dump's head: the Dump metadata, every property entity, the core items."""
    lines = [
        f"<{WIKIBASE}Dump> <http://creativecommons.org/ns#license> <http://creativecommons.org/publicdomain/zero/1.0/> .",
        f'<{WIKIBASE}Dump> <http://schema.org/dateModified> "2024-04-01T23:00:02Z"^^<{XSD}dateTime> .',
        f'<{WIKIBASE}Dump> <http://schema.org/softwareVersion> "1.0.0" .',
        f"<{WIKIBASE}Dump> {RDF_TYPE} <http://schema.org/Dataset> .",
        f"<{WIKIBASE}Dump> {RDF_TYPE} <http://www.w3.org/2002/07/owl#Ontology> .",
        f"<{WIKIBASE}Dump> <http://www.w3.org/2002/07/owl#imports> <http://wikiba.se/ontology-1.0.owl> .",
    ]
    for pid in sorted(v.props):
        p = v.props[pid]
        s = f"<{ENTITY}P{pid}>"
        lines.append(f"{s} {RDF_TYPE} <{WIKIBASE}Property> .")
        lab, desc = nt_literal([p.label])[0], nt_literal([p.description])[0]
        lines += [f"{s} {pred} {lab}@en ." for pred in (RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)]
        lines.append(f"{s} {DESCRIPTION} {desc}@en .")
        lines.append(f"{s} <{WIKIBASE}propertyType> <{WIKIBASE}{p.datatype}> .")
        lines.append(f"{s} <{WIKIBASE}directClaim> <{DIRECT}P{pid}> .")
        if p.datatype == "ExternalId":
            lines.append(f"{s} <{DIRECT}P31> <{ENTITY}Q19847637> .")  # skipped: not an item subject
    for c in CORE_ITEMS:
        s = f"<{ENTITY}Q{c.qid}>"
        lines.append(f"{s} {RDF_TYPE} <{WIKIBASE}Item> .")
        lab, desc = nt_literal([c.label])[0], nt_literal([c.description])[0]
        lines += [f"{s} {pred} {lab}@en ." for pred in (RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)]
        lines.append(f"{s} {DESCRIPTION} {desc}@en .")
        if c.pool.startswith("class:"):
            lines.append(f"{s} <{DIRECT}P279> <{ENTITY}Q35120> .")  # subclass of entity (unlabelled: dropped)
    return "\n".join(lines) + "\n"


# ====================================================================== workers
