"""Reasoning paths per question: GCR's KG-Trie from the served facts, in memory.

A :class:`PathGraph` is the graph of fact texts ``<subject> <relation> <object> .`` (an
index's facts, or a facts file): one node per entity label, one edge per fact (description
facts are not edges). Entities are named by their display labels, unique by the labels
stage's rule (a colliding label is qualified or dropped). Each edge knows its object's kind
where the facts say it (a facts file's kind column, a build's provenance): an entity is a
node that paths go on from, a literal ends the path, whatever its text, as in the pipeline.
An object of unknown kind (a bare fact text, a build without provenance) is the node of its
label: a literal whose text equals an entity's label is taken for that entity. For a
question's seed labels (or ids through an id -> label map) and L, :meth:`PathGraph.paths`
enumerates the simple paths of 1..L edges with the pipeline's caps
(``refactx_pipeline/stages/paths.py``, docs/paths.md):

* ``max_fanout`` F: a node's edges are ranked by (relation, target, literal first) and only
  the first F are followed; a path reaching a node of d > F edges counts d - F paths capped
  by ``fanout``;
* an edge back to an entity already on the path counts as ``not_simple`` (a literal never
  does);
* ``max_paths`` P per seed: each hop's new paths are ranked by text and kept while the seed
  holds fewer than P; the rest count as capped by ``max_paths`` and are not extended.

:meth:`PathGraph.index` tokenizes the paths (``A -> r -> B .``) as the pipeline's tokenize
stage does and returns an in-memory index that the fact matcher walks like any other, with
the trigger ``Path:``: a path that reaches its last entity can only be closed by ``end``, so
a dead end ends the path and the row never writes past the trie.
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import ConfigError, InputRefused
from ..tree.explore import enumerate_facts
from ..tree.index import TreeIndex, vocabulary_size
from ..tree.memory import MemoryTreeIndex
from ..tree.provenance import Provenance
from ..vocab import (
    PROBE_LABELS,
    Vocabulary,
    VocabularyLike,
    as_vocabulary,
    encode_facts,
    encode_flat,
    gather_pieces,
    has_space,
    open_vocabulary,
    spaces_start_pretokens,
    special_token_ids,
)
from .prompt import UNKNOWN, Prompt

TRIGGER = "Path:"
SEPARATOR = " -> "
END = " ."
PATH_PROMPT = Prompt(
    system=(
        "You answer questions from a knowledge graph. To read the graph, write a line that starts "
        "with Path: followed by a reasoning path from an entity of the question, as Entity -> relation "
        "-> Entity -> relation -> Entity . and the graph completes it with a path it holds. "
        "First say in one sentence what you need, then write the Path: lines you need, one per line. "
        "Then write a line that starts with Answer: and answer in a few words, using only the paths "
        f"you wrote. If they do not give the answer, write Answer: {UNKNOWN}"
    ),
    examples=(
        ("In which country is the Eiffel Tower?",
         "I need the country of the Eiffel Tower.\n"
         "Path: Eiffel Tower -> country -> France .\n"
         "Answer: France."),
    ),
)
log = logging.getLogger(__name__)
# a path as it is enumerated: its text (without the end), its nodes, its relations, and
# whether it may go on (its last node is an entity, not a literal)
_Path = tuple[str, tuple[str, ...], tuple[str, ...], bool]
_TEXT, _NODES, _RELATIONS, _GOES_ON = (operator.itemgetter(i) for i in range(4))

# facts about an entity that are not edges to another node
NOT_EDGES = ("description", "short description")
_FACT = re.compile(r"^<(.+?)> <(.+?)> <(.*)> \.$")
# an object's kind, as a facts file's second column and the provenance say it
ENTITY, LITERAL = "entity", "literal"
OBJECT_KINDS = (ENTITY, LITERAL)
# the provenance kinds whose sources are edges (descriptions are not)
_EDGE_SOURCES = ("statement", "inverse")


@dataclass(frozen=True)
class PathCaps:
    """L, and the caps of the module doc (the pipeline's ``path_index`` defaults)."""

    max_hops: int = 2
    max_fanout: int = 100
    max_paths: int = 10_000

    def __post_init__(self) -> None:
        if not 1 <= self.max_hops <= 4:
            raise ConfigError(f"max_hops must be 1 to 4, got {self.max_hops}")
        if self.max_fanout < 1 or self.max_paths < 1:
            raise ConfigError("max_fanout and max_paths must be at least 1")


@dataclass
class PathSet:
    """The paths of some seeds (texts without ``end``, each seed's in hop then text order)
    and what was counted on the way: ``by_hops``, ``capped`` by reason, ``not_simple``,
    ``unknown_seeds``."""

    paths: list[str] = field(default_factory=list)
    by_hops: dict[int, int] = field(default_factory=dict)
    capped: dict[str, int] = field(default_factory=lambda: {"fanout": 0, "max_paths": 0})
    not_simple: int = 0
    unknown_seeds: list[str] = field(default_factory=list)


class PathGraph:
    """Labels and their out-edges (relation, target, whether the target is an entity that
    paths go on from), each node's sorted (a literal before an entity of the same label, as
    the pipeline ranks them) and distinct; ``rejected``: the facts it was read from that are
    not ``<s> <r> <o> .`` or name an unknown object kind.

    ``edges`` maps a subject label to its edges: ``(relation, target)``, a target of unknown
    kind (read as the node of its label), or ``(relation, target, kind)`` with ``kind`` one of
    ``OBJECT_KINDS`` or None (unknown)."""

    def __init__(self, edges: Mapping[str, Iterable[tuple[str, str] | tuple[str, str, str | None]]],
                 rejected: int = 0) -> None:
        self._hold({node: {(edge[0], edge[1], _goes_on(edge[2] if len(edge) > 2 else None)) for edge in out}
                    for node, out in edges.items()}, rejected)

    def _hold(self, out: Mapping[str, Iterable[tuple[str, str, bool]]], rejected: int) -> None:
        """Keep ``out``: per subject label its (relation, target, whether paths go on) edges."""
        self.rejected = rejected
        self._out: dict[str, list[tuple[str, str, bool]]] = {node: sorted(set(edges)) for node, edges in out.items()}
        self._targets = {t for out in self._out.values() for _, t, goes_on in out if goes_on}
        self._literals = {t for out in self._out.values() for _, t, goes_on in out if not goes_on}
        # what does not depend on the question: the opened vocabulary, each label's ids
        self._vocabularies: dict[tuple[str, int, int], tuple[str, str, object, tuple[int, ...], int]] = {}
        self._segments: dict[int, _SegmentIds] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_fact_texts(cls, texts: Iterable[str], not_edges: Sequence[str] = NOT_EDGES) -> "PathGraph":
        """The graph of facts file lines: ``<s> <r> <o> .``, optionally followed by a tab and
        the object's kind (``entity`` or ``literal``; without it the object is read by its
        label). A line that is neither is counted in ``rejected``, not used."""
        return cls.from_facts(map(_fact_and_kind, texts), not_edges)

    @classmethod
    def from_facts(cls, facts: Iterable[tuple[str, str | None]],
                   not_edges: Sequence[str] = NOT_EDGES) -> "PathGraph":
        """The graph of ``(fact text, object kind)`` pairs, the kind one of ``OBJECT_KINDS`` or
        None (unknown: the object is the node of its label). A fact with sources of both kinds
        is given twice, once with each. A text that is not ``<s> <r> <o> .`` is counted in
        ``rejected``, not used."""
        edges: dict[str, set[tuple[str, str, bool]]] = {}
        rejected = 0
        skipped = frozenset(not_edges)
        for text, kind in facts:
            match = _FACT.match(text.strip())
            if match is None:
                rejected += 1
                continue
            subject, relation, obj = match.groups()
            if relation not in skipped:
                goes_on = _GOES_ON.get(kind)
                edges.setdefault(subject, set()).add((relation, obj, _goes_on(kind) if goes_on is None else goes_on))
        graph = cls.__new__(cls)
        graph._hold(edges, rejected)
        return graph

    @property
    def nodes(self) -> int:
        """Entities (and objects of unknown kind) by label, plus distinct literal texts."""
        return len(self._out.keys() | self._targets) + len(self._literals)

    def degree(self, label: str) -> int:
        return len(self._out.get(label, ()))

    def has_node(self, label: str) -> bool:
        """Whether ``label`` is an entity's (or an object's of unknown kind): a seed of paths."""
        return label in self._out or label in self._targets

    def paths(self, seeds: Sequence[str], caps: PathCaps = PathCaps(), separator: str = SEPARATOR) -> PathSet:
        """The capped simple paths of 1..``caps.max_hops`` edges from each seed label."""
        return self._walk(seeds, caps, separator)[0]

    def _walk(self, seeds: Sequence[str], caps: PathCaps, separator: str) -> tuple[PathSet, list[_Path]]:
        """:meth:`paths`, and per path (in the same order) its text, nodes and relations: the
        labels its text is made of, which :meth:`index` tokenizes one by one."""
        found = PathSet()
        parts: list[_Path] = []
        fanout, budget = caps.max_fanout, caps.max_paths
        for seed in dict.fromkeys(seeds):
            if not self.has_node(seed):
                found.unknown_seeds.append(seed)
                continue
            frontier: list[_Path] = [(seed, (seed,), (), True)]
            held = 0
            for hop in range(1, caps.max_hops + 1):
                extended: list[_Path] = []
                for text, nodes, relations, _ in frontier:
                    out = self._out.get(nodes[-1], ())
                    if len(out) > fanout:
                        found.capped["fanout"] += len(out) - fanout
                    for relation, target, goes_on in out[:fanout]:
                        # nodes before the last are entities: a literal is never on the path
                        if goes_on and target in nodes:
                            found.not_simple += 1
                        else:
                            extended.append((f"{text}{separator}{relation}{separator}{target}",
                                             nodes + (target,), relations + (relation,), goes_on))
                # ranked by text (ties by nodes; paths equal in both write the same text)
                extended.sort()
                kept = extended[:budget - held]
                found.capped["max_paths"] += len(extended) - len(kept)
                held += len(kept)
                found.by_hops[hop] = found.by_hops.get(hop, 0) + len(kept)
                found.paths.extend(map(_TEXT, kept))
                parts.extend(kept)
                # a path that ends at a literal is not extended
                frontier = [path for path in kept if path[3]]
                if not frontier:
                    break
        return found, parts

    def index(self, seeds: Sequence[str], tokenizer: VocabularyLike, caps: PathCaps = PathCaps(), *,
              separator: str = SEPARATOR, end: str = END, name: str = "paths") -> tuple[MemoryTreeIndex, PathSet]:
        """An in-memory index of the seeds' paths (each text + ``end``), tokenized as the
        pipeline's tokenize stage does; ``tokenizer`` as ``MemoryTreeIndex.from_facts``
        takes it. Raises ``ConfigError`` when the seeds have no path at all.

        The ids are those of the whole texts, but where the vocabulary allows it
        (:func:`segments_concatenate`) each distinct label is tokenized once per graph and
        a path's ids are its labels' ids put together; otherwise the texts are
        batch-encoded whole. Either way the ids are what ``encode_facts`` gives."""
        found, parts = self._walk(seeds, caps, separator)
        if not found.paths:
            raise ConfigError(f"no path from {', '.join(map(repr, seeds)) or 'no seed'}"
                              + (f" (not in the graph: {', '.join(map(repr, found.unknown_seeds))})"
                                 if found.unknown_seeds else ""))
        # one question at a time reads and extends the kept ids (a server may ask from threads)
        with self._lock:
            vocab_name, digest, backend, forbidden, vocab_size = self._vocabulary(tokenizer)
            store = self._segment_store(backend, separator, end)
            encoded = store.path_ids(parts, separator, end, forbidden) if store is not None else None
        if encoded is None:
            texts = [text + end for text in found.paths]
            return MemoryTreeIndex.from_facts(texts, tokenizer, name=name, index_kind="paths",
                                              dictionary=False), found
        index = MemoryTreeIndex.from_id_arrays(*encoded, name=name, vocabulary=vocab_name, vocabulary_sha256=digest,
                                               vocab_size=vocab_size, index_kind="paths")
        return index, found

    def prepare(self, tokenizer: VocabularyLike, *, separator: str = SEPARATOR, end: str = END) -> int:
        """Tokenize every label of the graph now, in one batch, so that no later question
        tokenizes any (every build is warm); ``tokenizer`` as :meth:`index` takes it. Returns
        how many labels were tokenized: 0 when the vocabulary encodes whole texts, where
        there is nothing to keep. Labels with a space at an edge are left out (their paths
        are encoded whole)."""
        with self._lock:
            backend = self._vocabulary(tokenizer)[2]
            store = self._segment_store(backend, separator, end)
            if store is None:
                return 0
            relations = (relation for out in self._out.values() for relation, _, _ in out)
            labels = [label for label in dict.fromkeys(itertools.chain(self._out, self._targets, self._literals,
                                                                       relations))
                      if label and not label[0].isspace() and not label[-1].isspace() and label not in store.row]
            if labels:
                store._add(labels)
            return len(labels)

    def forget_tokens(self) -> None:
        """Drop the label ids and vocabularies kept from earlier questions (the next
        :meth:`index` tokenizes its labels again: a cold build, as the benchmark measures it)."""
        with self._lock:
            self._vocabularies.clear()
            self._segments.clear()

    def _vocabulary(self, tokenizer: VocabularyLike) -> tuple[str, str, object, tuple[int, ...], int]:
        """(vocabulary name, sha256, ``tokenizers.Tokenizer``, forbidden ids, vocabulary size) as
        ``MemoryTreeIndex.from_facts`` derives them; a ``tokenizer.json`` path is opened and
        hashed once per graph (again when the file's size or time changes), not per question."""

        if isinstance(tokenizer, (str, os.PathLike)):
            path = Path(tokenizer)
            stat = path.stat()
            key = (os.fspath(path), stat.st_size, stat.st_mtime_ns)
            held = self._vocabularies.get(key)
            if held is None:
                vocab = open_vocabulary((path if path.is_dir() else path.parent).name, os.fspath(path))
                backend = vocab.tokenizer()
                held = (vocab.name, vocab.sha256, backend, tuple(vocab.forbidden_ids), vocabulary_size(backend))
                self._vocabularies = {key: held}  # one at a time: a graph serves one model
            return held
        if isinstance(tokenizer, Vocabulary) and tokenizer.from_file:
            return (tokenizer.name, tokenizer.sha256, tokenizer.tokenizer(), tuple(tokenizer.forbidden_ids),
                    tokenizer.vocab_size)
        backend = as_vocabulary(tokenizer).tokenizer()
        return "", "", backend, special_token_ids(backend), vocabulary_size(tokenizer)

    def _segment_store(self, backend: object, separator: str, end: str) -> "_SegmentIds | None":
        """The graph's label ids for ``backend`` (kept while the graph lives, for a few
        tokenizers), or None when its paths must be encoded whole."""
        if not _splits_at(separator, end):
            return None
        held = self._segments.get(id(backend))
        if held is None or held.tokenizer is not backend:
            if len(self._segments) >= 4:  # a few models at most; the oldest goes
                self._segments.pop(next(iter(self._segments)))
            held = _SegmentIds(backend, segments_concatenate(backend, separator, end))
            self._segments[id(backend)] = held
        return held if held.exact else None


# ---------------------------------------------------------------- tokenizing a path by its labels
# A path's text is ``Fact:`` (the tokenize stage's context, cut off after encoding), then
# " " + label, " ->", " " + relation, " ->", " " + label ..., " .": every piece after the
# first starts with a space followed by a non-space, where the vocabularies that
# ``vocab.spaces_start_pretokens`` accepts always begin a new pre-token (the derivation is
# there): the ids of the whole text are the ids of its pieces encoded alone, put together.
# Any other vocabulary encodes whole texts. The derivation is then checked on probe paths
# (``vocab.PROBE_LABELS``) per tokenizer.


def _splits_at(separator: str, end: str) -> bool:
    """Whether ``separator`` is " X " and ``end`` is "" or " Y" with X, Y without spaces:
    the path format whose pieces all start with a space followed by a non-space."""
    core = separator[1:-1]
    return (len(separator) > 2 and separator[0] == " " and separator[-1] == " " and not has_space(core)
            and (end == "" or (len(end) > 1 and end[0] == " " and not has_space(end[1:]))))


def segments_concatenate(tokenizer: VocabularyLike, separator: str = SEPARATOR, end: str = END) -> bool:
    """Whether, for this ``tokenizers.Tokenizer`` and path format, the ids ``encode_facts``
    gives a path text equal its labels' ids encoded alone (each as " " + label) and put
    together: derived from the tokenizer's configuration (see above), then checked on probe
    paths built from ``PROBE_LABELS``."""
    if not _splits_at(separator, end) or not spaces_start_pretokens(tokenizer):
        return False

    probe = _SegmentIds(tokenizer, exact=True)
    shapes = [((a, b), ("r",)) for a, b in zip(PROBE_LABELS, PROBE_LABELS[1:] + PROBE_LABELS[:1])]
    shapes += [((a, "B", c), (b, "part of")) for a, b, c in zip(PROBE_LABELS, PROBE_LABELS[3:], PROBE_LABELS[5:])]
    parts = [(separator.join(_interleave(nodes, relations)), nodes, relations, True) for nodes, relations in shapes]
    texts = [text + end for text, _, _, _ in parts]
    whole = encode_facts(tokenizer, texts, ())
    pieces = probe.path_ids(parts, separator, end, ())
    agree = (pieces is not None and bool((whole.status == 0).all())
             and np.array_equal(whole.offsets, pieces[1]) and np.array_equal(whole.values, pieces[0]))
    if not agree:
        log.warning("path labels cannot be tokenized alone for this tokenizer (probe paths differ): "
                    "paths are encoded whole")
    return agree


def _interleave(nodes: tuple[str, ...], relations: tuple[str, ...]) -> list[str]:
    out = [nodes[0]]
    for relation, node in zip(relations, nodes[1:]):
        out += [relation, node]
    return out


class _SegmentIds:
    """Token ids of " " + piece for every label (or separator core) a path used so far,
    encoded in one batch per question for the pieces not seen before and kept: labels do not
    depend on the question. ``exact``: whether pieces may be used at all for ``tokenizer``."""

    def __init__(self, tokenizer: VocabularyLike, exact: bool) -> None:
        self.tokenizer = tokenizer  # held: the cache is keyed by id(tokenizer)
        self.exact = exact
        self.row: dict[str, int] = {}
        self.values = np.zeros(0, dtype=np.int32)
        self.starts = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.int64)

    def _add(self, pieces: list[str]) -> None:
        lengths, values = encode_flat(self.tokenizer, None, [" " + piece for piece in pieces])
        starts = len(self.values) + np.cumsum(lengths) - lengths
        first = len(self.row)
        self.row.update(zip(pieces, range(first, first + len(pieces))))
        self.values = np.concatenate([self.values, values])
        self.starts = np.concatenate([self.starts, starts])
        self.lengths = np.concatenate([self.lengths, lengths])

    def path_ids(self, parts: Sequence[_Path], separator: str, end: str,
                 forbidden: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """The paths' ids as (values, offsets): path i's at ``values[offsets[i]:offsets[i + 1]]``.
        None when a new label has a space at an edge (or is empty): its piece boundary is not
        certain and the caller encodes whole texts. Raises ``ValueError`` as
        ``MemoryTreeIndex.from_facts`` does when a path holds a forbidden id."""
        core, tail = separator[1:-1], end[1:]
        # every path's nodes and relations in two flat lists (C-level chains, no loop per path)
        node_labels = list(itertools.chain.from_iterable(map(_NODES, parts)))
        relation_labels = list(itertools.chain.from_iterable(map(_RELATIONS, parts)))
        new = [p for p in dict.fromkeys(itertools.chain(node_labels, relation_labels, (core, tail)))
               if p and p not in self.row]
        if any(p[0].isspace() or p[-1].isspace() for p in new) or not all(node_labels) or not all(relation_labels):
            return None
        if new:
            self._add(new)
        hops = np.fromiter(map(len, map(_RELATIONS, parts)), dtype=np.int64, count=len(parts))
        # piece order of a path of h hops: node 0, then (core, relation k, core, node k) for
        # k = 1..h, then the tail: node k at 4k, relation k at 4k - 2, cores at 4k - 3, 4k - 1
        has_tail = 1 if tail else 0
        counts = 1 + 4 * hops + has_tail
        first_piece = np.cumsum(counts) - counts
        pieces = np.empty(int(counts.sum()), dtype=np.int64)
        pieces[:] = self.row[core]
        node_path = np.repeat(np.arange(len(parts)), hops + 1)
        node_k = np.arange(node_path.size) - np.repeat(np.cumsum(hops + 1) - (hops + 1), hops + 1)
        pieces[first_piece[node_path] + 4 * node_k] = np.fromiter(
            map(self.row.__getitem__, node_labels), dtype=np.int64, count=len(node_labels))
        relation_path = np.repeat(np.arange(len(parts)), hops)
        relation_k = 1 + np.arange(relation_path.size) - np.repeat(np.cumsum(hops) - hops, hops)
        pieces[first_piece[relation_path] + 4 * relation_k - 2] = np.fromiter(
            map(self.row.__getitem__, relation_labels), dtype=np.int64, count=len(relation_labels))
        if tail:
            pieces[first_piece + counts - 1] = self.row[tail]
        lengths = self.lengths[pieces]
        flat_ids = gather_pieces(self.values, self.starts, self.lengths, pieces)
        path_lengths = np.add.reduceat(lengths, first_piece) if len(parts) else lengths[:0]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(path_lengths, out=offsets[1:])
        if len(forbidden):
            bad = np.isin(flat_ids, np.asarray(forbidden, dtype=np.int32))
            if bad.any():
                rows_bad = np.unique(np.searchsorted(offsets, np.flatnonzero(bad), side="right") - 1)
                _, nodes, relations, _ = parts[int(rows_bad[0])]
                raise InputRefused(f"{len(rows_bad)} facts cannot be stored (special tokens, or fused with the "
                                 f"trigger), e.g. {separator.join(_interleave(nodes, relations)) + end!r}")
        return flat_ids.astype(np.int64), offsets


def _fact_and_kind(line: str) -> tuple[str, str | None]:
    """A facts file line as (fact text, object kind or None). A bare fact ends with `` .`` (a
    tab inside a label stays in it); a kind is the word after the line's last tab."""
    line = line.strip()
    if not line.endswith(" .") and "\t" in line:
        text, _, kind = line.rpartition("\t")
        if kind.strip() in OBJECT_KINDS:
            return text.rstrip(), kind.strip()
    return line, None  # a fact, or a line that from_facts rejects


# whether paths go on from an object of a kind (None: unknown, the node of its label)
_GOES_ON = {None: True, ENTITY: True, LITERAL: False}


def _goes_on(kind: str | None) -> bool:
    """Whether paths go on from an object of ``kind``: an entity, or a label of unknown kind."""
    if kind is not None and kind not in OBJECT_KINDS:
        raise ConfigError(f"object kind {kind!r}: expected one of {', '.join(OBJECT_KINDS)} or None")
    return kind != LITERAL


def object_kinds(provenance: Provenance) -> list[str]:
    """The kinds of a stored fact's object, one per kind of its edge sources (a statement's
    item object or an inverse fact's subject: ``entity``; a statement's literal value:
    ``literal``); none for a description."""
    kinds = {ENTITY if source.kind == "inverse" or source.object is not None else LITERAL
             for source in provenance.sources if source.kind in _EDGE_SOURCES}
    return sorted(kinds)


# facts whose provenance is read at once while an index's graph is read
_PROVENANCE_BATCH = 50_000


def graph_of_index(index: TreeIndex, tokenizer: VocabularyLike) -> PathGraph:
    """The graph of every fact of a (small) index, walked once: an index file's facts. With
    the build's provenance, each object's kind is read from its sources (descriptions are
    not edges); without it (an index file, a build loaded without provenance) objects are
    read by their labels. A PostgreSQL build of Wikidata is too large to walk; give its
    facts as a file instead."""

    texts = [text for text, _ in enumerate_facts(index, tokenizer)]
    facts: list[tuple[str, str | None]] = []
    for start in range(0, len(texts), _PROVENANCE_BATCH):
        chunk = texts[start:start + _PROVENANCE_BATCH]
        found = index.provenance(chunk)
        if found is None:
            return PathGraph.from_facts((text, None) for text in texts)
        facts += [(text, kind) for text, provenance in zip(chunk, found) for kind in object_kinds(provenance)]
    return PathGraph.from_facts(facts)


def read_fact_texts(path: str) -> list[str]:
    """A facts file: one ``<s> <r> <o> .`` a line (blank lines skipped)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [line.strip() for line in fh if line.strip()]
    except OSError as exc:
        raise ConfigError(f"facts file {path}: {exc.strerror or exc}") from exc


def seed_labels(seeds: Sequence[str], id_labels: Mapping[str, str] | None = None) -> list[str]:
    """Seeds as labels: an id found in ``id_labels`` is replaced by its label, anything else
    is taken as a label already."""
    table = id_labels or {}
    return [table.get(seed, seed) for seed in seeds]


def read_id_labels(path: str) -> dict[str, str]:
    """An ``id<TAB>label`` file (the labels stage's entity and label columns) as a map; a
    line without a tab is an error naming it."""
    table: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                line = line.rstrip("\n")
                if not line:
                    continue
                entity, sep, label = line.partition("\t")
                if not sep or not entity or not label:
                    raise ConfigError(f"{path}:{number}: expected ID<TAB>LABEL")
                table[entity] = label
    except OSError as exc:
        raise ConfigError(f"labels file {path}: {exc.strerror or exc}") from exc
    return table
