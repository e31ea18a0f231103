"""Reasoning paths per question: GCR's KG-Trie from the served facts, in memory.

A :class:`PathGraph` is the graph of fact texts ``<subject> <relation> <object> .`` (an
index's facts, or a facts file): one node per label, one edge per fact (description facts
are not edges). Without entity ids per fact, nodes are display labels, unique by the labels
stage's rule (a colliding label is qualified or dropped), and a literal object is the node
of its rendered text. For a question's seed labels (or ids through an id -> label map) and
L, :meth:`PathGraph.paths` enumerates the simple paths of 1..L edges with the pipeline's
caps (``refactx_pipeline/stages/paths.py``, docs/paths.md):

* ``max_fanout`` F: a node's edges are ranked by (relation, target) and only the first F
  are followed; a path reaching a node of d > F edges counts d - F paths capped by
  ``fanout``;
* an edge back to a node already on the path counts as ``not_simple``;
* ``max_paths`` P per seed: each hop's new paths are ranked by text and kept while the seed
  holds fewer than P; the rest count as capped by ``max_paths`` and are not extended.

:meth:`PathGraph.index` tokenizes the paths (``A -> r -> B .``) as the pipeline's tokenize
stage does and returns an in-memory index that the fact matcher walks like any other, with
the trigger ``Path:``: a path that reaches its last entity can only be closed by ``end``, so
a dead end ends the path and the row never writes past the trie.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .errors import ConfigError
from .index import TreeIndex
from .memory import MemoryTreeIndex
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
# facts about an entity that are not edges to another node
NOT_EDGES = ("description", "short description")
_FACT = re.compile(r"^<(.+?)> <(.+?)> <(.*)> \.$")


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
    """Labels and their out-edges (relation, target), each node's sorted and distinct;
    ``rejected``: the fact texts it was read from that are not ``<s> <r> <o> .``."""

    def __init__(self, edges: Mapping[str, Iterable[tuple[str, str]]], rejected: int = 0) -> None:
        self.rejected = rejected
        self._out: dict[str, list[tuple[str, str]]] = {node: sorted(set(out)) for node, out in edges.items()}
        self._targets = {t for out in self._out.values() for _, t in out}

    @classmethod
    def from_fact_texts(cls, texts: Iterable[str], not_edges: Sequence[str] = NOT_EDGES) -> "PathGraph":
        """The graph of fact texts; a text that is not ``<s> <r> <o> .`` is counted in
        ``rejected``, not used."""
        edges: dict[str, set[tuple[str, str]]] = {}
        rejected = 0
        skipped = frozenset(not_edges)
        for text in texts:
            match = _FACT.match(text.strip())
            if match is None:
                rejected += 1
                continue
            subject, relation, obj = match.groups()
            if relation not in skipped:
                edges.setdefault(subject, set()).add((relation, obj))
        return cls(edges, rejected)

    @property
    def nodes(self) -> int:
        return len(self._out.keys() | self._targets)

    def degree(self, label: str) -> int:
        return len(self._out.get(label, ()))

    def has_node(self, label: str) -> bool:
        return label in self._out or label in self._targets

    def paths(self, seeds: Sequence[str], caps: PathCaps = PathCaps(), separator: str = SEPARATOR) -> PathSet:
        """The capped simple paths of 1..``caps.max_hops`` edges from each seed label."""
        found = PathSet()
        fanout, budget = caps.max_fanout, caps.max_paths
        for seed in dict.fromkeys(seeds):
            if not self.has_node(seed):
                found.unknown_seeds.append(seed)
                continue
            frontier: list[tuple[tuple[str, ...], str]] = [((seed,), seed)]
            held = 0
            for hop in range(1, caps.max_hops + 1):
                extended: list[tuple[str, tuple[str, ...]]] = []
                for nodes, text in frontier:
                    out = self._out.get(nodes[-1], ())
                    if len(out) > fanout:
                        found.capped["fanout"] += len(out) - fanout
                    for relation, target in out[:fanout]:
                        if target in nodes:
                            found.not_simple += 1
                        else:
                            extended.append((f"{text}{separator}{relation}{separator}{target}", nodes + (target,)))
                extended.sort()
                kept = extended[:budget - held]
                found.capped["max_paths"] += len(extended) - len(kept)
                held += len(kept)
                found.by_hops[hop] = found.by_hops.get(hop, 0) + len(kept)
                found.paths.extend(text for text, _ in kept)
                frontier = [(nodes, text) for text, nodes in kept]
                if not frontier:
                    break
        return found

    def index(self, seeds: Sequence[str], tokenizer: object, caps: PathCaps = PathCaps(), *,
              separator: str = SEPARATOR, end: str = END, name: str = "paths") -> tuple[MemoryTreeIndex, PathSet]:
        """An in-memory index of the seeds' paths (each text + ``end``), tokenized as the
        pipeline's tokenize stage does; ``tokenizer`` as ``MemoryTreeIndex.from_facts``
        takes it. Raises ``ConfigError`` when the seeds have no path at all."""
        found = self.paths(seeds, caps, separator)
        if not found.paths:
            raise ConfigError(f"no path from {', '.join(map(repr, seeds)) or 'no seed'}"
                              + (f" (not in the graph: {', '.join(map(repr, found.unknown_seeds))})"
                                 if found.unknown_seeds else ""))
        texts = [text + end for text in found.paths]
        return MemoryTreeIndex.from_facts(texts, tokenizer, name=name), found


def graph_of_index(index: TreeIndex, tokenizer: object) -> PathGraph:
    """The graph of every fact of a (small) index, walked once: an index file's facts. A
    PostgreSQL build of Wikidata is too large to walk; give its facts as a file instead."""
    from .explore import enumerate_facts

    return PathGraph.from_fact_texts(text for text, _ in enumerate_facts(index, tokenizer))


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
