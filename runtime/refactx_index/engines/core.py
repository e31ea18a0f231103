"""What every engine adapter shares: requests in slots, one matcher per index, one mask.

:class:`FactConstraint` is the whole adapter contract from the engine's side. Per step an
engine gives it:

1. the changes to its batch -- a request entering a slot (:meth:`FactConstraint.add`:
   its prompt ids and the index it asked for, or none), leaving it
   (:meth:`~FactConstraint.remove`), moving or swapping slots (:meth:`~FactConstraint.move`);
2. the token each constrained slot wrote last step (:meth:`~FactConstraint.step`);
3. the logits of the step with the slot of each row (:meth:`~FactConstraint.apply`), which
   it masks in place: one :class:`~refactx_index.constraint.batch.StepMask` for all rows of all
   indexes, one copy and three kernels (:mod:`refactx_index.constraint.masking`).

Slots of requests that asked for no index are never touched: their logits stay
bit-identical. Each index has its own :class:`~refactx_index.constraint.batch.BatchMatcher`;
``matcher_seconds`` and ``mask_seconds`` add up the time of each part (benchmarks).

What the engine reads back is public: ``slots`` (slot -> index), ``refused`` (slots that may
only end), :meth:`FactConstraint.busy`, :meth:`FactConstraint.build_of`. A finished reply's
facts are read by :func:`refactx_index.qa.ask.read_facts`, the one reader the server, ``ask``
and ``eval`` share. Every engine takes its trigger ids, end ids and mask width from one
:class:`~refactx_index.vocab.Vocabulary` (:meth:`FactConstraint.for_vocabulary`).
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..constraint.batch import BatchMatcher, StepMask
from ..constraint.masking import MaskApplier
from ..constraint.matcher import FactMatcher
from ..errors import ConfigError, UnknownIndex
from ..prompting.paths import PATH_PROMPT, TRIGGER
from ..prompting.prompt import Prompt
from ..tree.index import ServedBuild, TreeIndex
from ..tree.memory import MemoryTreeIndex
from ..tree.pg import open_index
from ..vocab import CONTEXT, Vocabulary, VocabularyLike, as_vocabulary

if TYPE_CHECKING:
    import torch


log = logging.getLogger(__name__)

__all__ = ["FactConstraint", "index_prompt", "index_trigger", "index_triggers", "is_dsn", "open_indexes",
           "trigger_variants"]


def trigger_variants(vocabulary: VocabularyLike, trigger: str = CONTEXT) -> list[list[int]]:
    """The ids a model may write for ``trigger``: alone, after a space, after a newline.

    The newline variant is read as a continuation (the ids of ``"\\n" + trigger`` after
    those of ``"\\n"``): SentencePiece vocabularies write ``Fact`` without the word-start
    mark there, which neither of the other two encodings gives.
    """
    alone, spaced, newline, nl = as_vocabulary(vocabulary).encode([trigger, " " + trigger, "\n" + trigger, "\n"])
    variants = [alone, spaced]
    if newline[: len(nl)] == nl and len(newline) > len(nl):
        variants.append(newline[len(nl):])
    return variants


def index_trigger(index: TreeIndex) -> str:
    """What starts a constrained span over ``index``: ``Path:`` over a path index
    (``info.index_kind`` ``paths``, docs/paths.md), ``Fact:`` over a fact index."""
    if index.info.index_kind == "paths":
        return TRIGGER
    return CONTEXT


def index_prompt(index: TreeIndex) -> "Prompt":
    """The prompt that explains ``index_trigger(index)`` to the model: the path prompt over a
    path index, the fact prompt otherwise."""
    if index.info.index_kind == "paths":
        return PATH_PROMPT

    return Prompt()


def index_triggers(vocabulary: VocabularyLike, indexes: Mapping[str, TreeIndex],
                   trigger: str | None = None) -> dict[str, list[list[int]]]:
    """Each index's trigger variants (:func:`trigger_variants`): of ``trigger`` for every
    index when given, else of each index's own (:func:`index_trigger`)."""
    return {name: trigger_variants(vocabulary, trigger or index_trigger(ix)) for name, ix in indexes.items()}


def open_indexes(spec: Mapping[str, str], *, follow: bool = True) -> dict[str, TreeIndex]:
    """Open the indexes an engine serves, by name: ``{"name": "path/to/file.rfx"}`` (an
    in-memory index file) or ``{"name": "postgresql://..."}`` or a keyword DSN
    (``"host=... dbname=..."``: the active build of that name, following activations)."""
    opened: dict[str, TreeIndex] = {}
    for name, where in spec.items():
        if not isinstance(where, str) or not where:
            raise ConfigError(f"index {name!r}: give a .rfx file or a PostgreSQL DSN")
        if is_dsn(where):
            opened[name] = open_index(where, name, follow=follow)
        else:
            opened[name] = MemoryTreeIndex.load(where)
    return opened


def is_dsn(where: str) -> bool:
    """Whether an index spec names PostgreSQL: a ``postgresql://`` URI, or a keyword DSN
    (``host=... dbname=...``) that is not an existing file's path."""
    if where.startswith(("postgresql://", "postgres://")):
        return True
    return bool(re.match(r"\s*[A-Za-z_]+\s*=", where)) and not os.path.exists(where)


class FactConstraint:
    """Requests in slots over one :class:`BatchMatcher` per index (see the module doc)."""

    def __init__(self, indexes: Mapping[str, TreeIndex],
                 trigger_ids: Sequence[Sequence[int]] | Mapping[str, Sequence[Sequence[int]]],
                 eos_ids: Sequence[int], *, vocab_size: int,
                 device: "torch.device | str | None" = None, pin_memory: bool | None = None) -> None:
        """``trigger_ids``: the trigger's variants for every index, or per index name (a fact
        index and a path index in one engine start at ``Fact:`` and ``Path:``)."""
        if not indexes:
            raise ConfigError("no index to constrain by")
        self.indexes = dict(indexes)
        if isinstance(trigger_ids, Mapping):
            missing = sorted(set(self.indexes) - set(trigger_ids))
            if missing:
                raise ConfigError(f"no trigger for the indexes {missing}")
            triggers = {name: trigger_ids[name] for name in self.indexes}
        else:
            triggers = dict.fromkeys(self.indexes, trigger_ids)
        self.matchers = {name: BatchMatcher(FactMatcher(ix, triggers[name], eos_ids))
                         for name, ix in self.indexes.items()}
        self.vocab_size = vocab_size
        self.applier = MaskApplier(device, pin_memory=pin_memory)
        self.slots: dict[int, str] = {}  # slot -> the index its request asked for
        self.refused: set[int] = set()  # slots whose request may only end (refuse)
        self._names = list(self.matchers)
        self._owner = np.full(64, -1, dtype=np.int64)  # slot -> position in _names, -1: none
        self.eos = np.asarray(sorted({int(e) for e in eos_ids}), dtype=np.int64)
        self.matcher_seconds = 0.0
        self.mask_seconds = 0.0
        self.steps = 0
        self.rows_masked = 0

    @classmethod
    def for_vocabulary(cls, indexes: Mapping[str, TreeIndex], vocabulary: Vocabulary, *,
                       trigger: str | None = None, device: "torch.device | str | None" = None,
                       pin_memory: bool | None = None) -> "FactConstraint":
        """The constraint over ``indexes`` with the trigger ids, end ids and mask width of
        ``vocabulary`` (a model's: :func:`~refactx_index.vocab.open_model_vocabulary`).
        ``trigger``: what opens a span for every index (default: each index's kind says)."""
        if not vocabulary.eos_ids:
            raise ConfigError(f"vocabulary {vocabulary.name!r} names no end-of-sequence id: "
                              "a dead end could not be ended")
        return cls(indexes, index_triggers(vocabulary, indexes, trigger), vocabulary.eos_ids,
                   vocab_size=vocabulary.logits_size, device=device, pin_memory=pin_memory)

    # ------------------------------------------------------------------ batch changes
    def index_names(self) -> list[str]:
        return sorted(self.indexes)

    def busy(self) -> bool:
        """Whether any slot is constrained or refused (else a step's logits are left alone)."""
        return bool(self.slots or self.refused)

    def add(self, slot: int, index: str, prompt_ids: Sequence[int], *, in_fact: bool = False,
            output_ids: Sequence[int] = (), build: ServedBuild | None = None) -> None:
        """A request enters ``slot``, constrained by ``index``; ``output_ids`` are tokens it
        already generated (a request resumed after preemption); ``build``: the build it reads
        (default: the serving one now). Raises :class:`~refactx_index.errors.UnknownIndex`
        (naming the served indexes) for an index this constraint does not hold."""
        self.add_rows([slot], index, [prompt_ids], in_fact=in_fact, build=build)
        if output_ids:
            started = time.perf_counter()
            matcher = self.matchers[index]
            for tok in output_ids:
                matcher.step(np.asarray([slot]), np.asarray([int(tok)]))
            self.matcher_seconds += time.perf_counter() - started

    def add_rows(self, slots: Sequence[int], index: str, prompts: Sequence[Sequence[int]], *,
                 in_fact: bool = False, build: ServedBuild | None = None) -> None:
        """Requests enter ``slots`` together, each constrained by ``index`` from the end of
        its prompt (one matcher call: a generation's whole batch starts at once)."""
        if index not in self.matchers:
            raise UnknownIndex(f"unknown index {index!r}; this engine serves {self.index_names()}")
        slots = [int(s) for s in slots]
        self.remove(slots)
        started = time.perf_counter()
        self.matchers[index].add(slots, prompts, in_fact=[in_fact] * len(slots), build=build)
        self.slots.update(dict.fromkeys(slots, index))
        self._sync_owner()
        self.matcher_seconds += time.perf_counter() - started

    def gather(self, parents: np.ndarray) -> None:
        """Slot ``i`` takes the request and state slot ``parents[i]`` had, for every ``i`` below
        ``len(parents)`` (beam search reorders, copies and drops its rows). The parents must
        all be constrained by one index."""
        parents = np.asarray(parents, dtype=np.int64)
        held = {self.slots.get(p) for p in parents.tolist()}
        if len(held) != 1 or None in held:
            raise ConfigError("gather needs every parent slot constrained by one index")
        (name,) = held
        started = time.perf_counter()
        self.matchers[name].gather(parents)
        if any(self.slots.get(s) != name for s in range(parents.size)):
            self.slots.update(dict.fromkeys(range(parents.size), name))
            self._sync_owner()
        self.matcher_seconds += time.perf_counter() - started

    def refuse(self, slot: int) -> None:
        """``slot`` asked for a constraint this engine cannot give: it may only end (an
        answer that was asked to be constrained is never given unconstrained)."""
        self.remove([slot])
        self.refused.add(int(slot))

    def remove(self, slots: Sequence[int]) -> None:
        for slot in slots:
            self.refused.discard(int(slot))
            held = self.slots.pop(int(slot), None)
            if held is not None:
                self.matchers[held].remove([int(slot)])
        self._sync_owner()

    def move(self, src: int, dst: int, *, swap: bool = False) -> None:
        """The request in ``src`` moves to ``dst`` (``swap``: the two exchange slots)."""
        ra, rb = src in self.refused, dst in self.refused
        self.refused -= {src, dst}
        if ra:
            self.refused.add(dst)
        if rb and swap:
            self.refused.add(src)
        a, b = self.slots.pop(src, None), self.slots.pop(dst, None)
        if swap:
            if a is not None and b is not None and a == b:
                self.matchers[a].move(src, dst, swap=True)
            else:
                # parked beyond every slot the engine uses, so the two moves never collide
                park = max(m.capacity for m in self.matchers.values()) + 1
                if a is not None:
                    self.matchers[a].move(src, park)
                if b is not None:
                    self.matchers[b].move(dst, src)
                if a is not None:
                    self.matchers[a].move(park, dst)
            if a is not None:
                self.slots[dst] = a
            if b is not None:
                self.slots[src] = b
            self._sync_owner()
            return
        if b is not None:
            self.matchers[b].remove([dst])
        if a is not None:
            self.matchers[a].move(src, dst)
            self.slots[dst] = a
        self._sync_owner()

    def constrained_slots(self) -> list[int]:
        return sorted(self.slots)

    def index_of(self, slot: int) -> str | None:
        return self.slots.get(slot)

    def build_of(self, slot: int) -> ServedBuild | None:
        """The build ``slot``'s request reads from its first token to its last (pinned when
        it was added; None: the slot is not constrained)."""
        name = self.slots.get(slot)
        return None if name is None else self.matchers[name].build[slot]

    # ------------------------------------------------------------------ steps
    def step(self, slots: np.ndarray, tokens: np.ndarray) -> None:
        """Each ``slots[i]`` (constrained or not) wrote ``tokens[i]``."""
        started = time.perf_counter()
        slots = np.asarray(slots, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        for name, sel in self._by_index(slots):
            self.matchers[name].step(slots[sel], tokens[sel])
        self.matcher_seconds += time.perf_counter() - started

    def mask(self, row_slots: np.ndarray, width: int | None = None) -> StepMask:
        """The step's mask for logits whose row ``r`` belongs to slot ``row_slots[r]``;
        ``width``: the logits' (default: the vocabulary's ``vocab_size``)."""
        started = time.perf_counter()
        row_slots = np.asarray(row_slots, dtype=np.int64)
        parts = []
        for name, sel in self._by_index(row_slots):
            rows = np.flatnonzero(sel)
            part = self.matchers[name].mask(row_slots[rows], width or self.vocab_size)
            if not part.empty:
                parts.append(StepMask(rows[part.rows], rows[part.token_rows], part.tokens))
        if self.refused:
            rows = np.flatnonzero(np.isin(row_slots, np.fromiter(self.refused, dtype=np.int64)))
            if rows.size:
                parts.append(StepMask(rows, np.repeat(rows, self.eos.size), np.tile(self.eos, rows.size)))
        if not parts:
            mask = StepMask(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        elif len(parts) == 1:
            mask = parts[0]
        else:
            rows = np.concatenate([p.rows for p in parts])
            mask = StepMask(np.sort(rows), np.concatenate([p.token_rows for p in parts]),
                            np.concatenate([p.tokens for p in parts]))
        self.matcher_seconds += time.perf_counter() - started
        return mask

    def apply(self, logits: "torch.Tensor", row_slots: np.ndarray) -> "torch.Tensor":
        """Mask ``logits`` in place (row ``r`` is slot ``row_slots[r]``) and return them."""
        mask = self.mask(row_slots, logits.shape[-1])
        started = time.perf_counter()
        self.applier(logits, mask)
        self.mask_seconds += time.perf_counter() - started
        self.steps += 1
        self.rows_masked += int(mask.rows.size)
        return logits

    def _sync_owner(self) -> None:
        """Rebuild the slot -> index array after the batch changed (not per step)."""
        top = max(self.slots, default=-1) + 1
        if top > self._owner.size:
            self._owner = np.full(max(top, 2 * self._owner.size), -1, dtype=np.int64)
        else:
            self._owner.fill(-1)
        for slot, held in self.slots.items():
            self._owner[slot] = self._names.index(held)

    def _by_index(self, slots: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """``(index name, boolean selector over slots)`` for each index with a slot among them."""
        if not self.slots or slots.size == 0:
            return []
        inside = slots < self._owner.size
        owner = np.where(inside, self._owner[np.where(inside, slots, 0)], -1)
        return [(name, owner == k) for k, name in enumerate(self._names) if (owner == k).any()]
