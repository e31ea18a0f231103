"""The matcher's rules over a whole batch at once: state per slot, one pass per step.

:class:`~refactx_index.constraint.matcher.FactMatcher` states the rules and applies them row by row
(its :meth:`~refactx_index.constraint.matcher.FactMatcher.scan` is the reference). A serving engine
steps hundreds of rows a step, so :class:`BatchMatcher` keeps every row's state in
arrays indexed by *slot* (the engine's persistent row or request index) and advances all
rows of a step with a constant number of numpy calls:

* **The arena.** The decoded rows (fragments) that live slots stand on are laid end to
  end in one set of arrays. A node is a global position; its children are a contiguous,
  sorted range (the rows are breadth-first), and a sorted key ``parent << 32 | token``
  per child makes "the child of node *g* by token *t*" one ``searchsorted`` for every
  row of the step. The arena is compacted to the fragments in use when it grows past
  ``arena_nodes``.
* **The common step** (a token inside the fragment already held, no fact of this row
  sharing the prefix) is that one search plus array writes: no Python per row.
* **The rare steps** run per row: crossing into another stored row (the index's
  :meth:`~refactx_index.tree.index.RowTreeIndex.advance_batch`, one round trip for all rows
  that cross), a fact ending (recorded as generated), a trigger entering a fact (one
  root lookup for all rows entering), and rows whose earlier facts share the current
  prefix (their continuations are net of those facts, as the rules say).
* **Triggers** are found by comparing each slot's last few ids (a small history array)
  with every tokenization of the trigger: a constant number of array compares.

Where the runtime was built with a C compiler, the common rows of a step and the mask's
allowed ids are a compiled loop (``_step.c``; ``STEPPER`` below); the rare rows go through
the same numpy code either way.

:meth:`BatchMatcher.mask` gives the step's allowed ids as one flattened ``(row, token)``
list (:class:`StepMask`), which :mod:`refactx_index.constraint.masking` applies to the logits of the
whole batch with one copy and a constant number of kernels.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import InputRefused
from ..tree.format import Fragment, encode_prefix
from ..tree.index import Cursor, ServedBuild
from .matcher import DEAD, FACT, FREE, FactMatcher

try:  # built from _step.c where the runtime was installed with a C compiler
    from . import _step
except ImportError:  # numpy steps the same rows (a larger fixed cost per step)
    _step = None

log = logging.getLogger(__name__)

__all__ = ["BatchMatcher", "StepMask", "STEPPER", "STEPPERS"]

_EMPTY = np.zeros(0, dtype=np.int64)

# How a step's common rows are advanced and its mask collected: "compiled" (``_step.c``: one
# loop over the rows, the rare rows left to the numpy code) where the runtime was installed
# with it, else "numpy" (a constant number of whole-array calls). Both give the same states and
# masks (tests/runtime/test_batch_matcher.py walks both). REFACTX_MATCHER=numpy in the environment, or
# ``BatchMatcher(stepper="numpy")``, picks numpy (bench/bench_engines.py times both).
STEPPERS = ("compiled", "numpy") if _step is not None else ("numpy",)
STEPPER = os.environ.get("REFACTX_MATCHER") or STEPPERS[0]
if STEPPER not in STEPPERS:
    raise ImportError(f"REFACTX_MATCHER={STEPPER!r}: this runtime has the matcher steps {list(STEPPERS)}")


@dataclass(frozen=True)
class StepMask:
    """The allowed ids of one step's constrained rows.

    ``rows`` are the constrained rows (positions in the step's batch, ascending); for each
    ``k``, token ``tokens[k]`` is allowed in row ``token_rows[k]``. Every other token of a
    constrained row is masked; an unconstrained row is left alone.
    """

    rows: np.ndarray
    token_rows: np.ndarray
    tokens: np.ndarray

    @property
    def empty(self) -> bool:
        return self.rows.size == 0


_NO_MASK = StepMask(_EMPTY, _EMPTY, _EMPTY)  # a step without constrained rows


class _Arena:
    """Fragments laid end to end (see the module doc). Node ``g`` of the arena is node
    ``g - base`` of the fragment registered at ``base``."""

    def __init__(self, capacity: int = 1 << 14) -> None:
        self.size = 0
        self._alloc(capacity)
        self.bases: list[int] = []
        self.frags: list[Fragment] = []
        self._by_id: dict[int, int] = {}  # id(fragment) -> base; self.frags keeps it alive

    def _alloc(self, capacity: int) -> None:
        self.tokens = np.full(capacity, -1, dtype=np.int64)
        self.keys = np.full(capacity, np.iinfo(np.int64).max, dtype=np.int64)
        self.child_start = np.zeros(capacity, dtype=np.int64)
        self.child_count = np.zeros(capacity, dtype=np.int64)
        self.leaves = np.zeros(capacity, dtype=np.int64)
        self.ends = np.zeros(capacity, dtype=bool)
        self.external = np.zeros(capacity, dtype=bool)
        # external node -> the arena node where its stored row starts, once a walk crossed it
        self.link = np.full(capacity, -1, dtype=np.int64)

    def _grow(self, need: int) -> None:
        capacity = self.tokens.size
        if need <= capacity:
            return
        while capacity < need:
            capacity *= 2
        old = (self.tokens, self.keys, self.child_start, self.child_count, self.leaves,
               self.ends, self.external, self.link)
        self._alloc(capacity)
        for new, prev in zip((self.tokens, self.keys, self.child_start, self.child_count,
                              self.leaves, self.ends, self.external, self.link), old):
            new[: self.size] = prev[: self.size]

    def add(self, frag: Fragment) -> int:
        """The base of ``frag`` in the arena, appending it on first use."""
        base = self._by_id.get(id(frag))
        if base is not None:
            return base
        n = frag.n_nodes
        base = self.size
        self._grow(base + n)
        end = base + n
        self.tokens[base:end] = frag.tokens
        self.child_start[base:end] = frag.child_start + base
        self.child_count[base:end] = frag.child_count
        self.leaves[base:end] = frag.leaves
        self.ends[base:end] = frag.ends
        self.external[base:end] = frag.external
        # node 0 has no parent: a key just below this fragment's first parent key keeps
        # the array sorted (every earlier key has a smaller parent)
        self.keys[base] = (base << 32) - 1
        if n > 1:
            parents = np.repeat(np.arange(base, end, dtype=np.int64), frag.child_count)
            self.keys[base + 1:end] = (parents << 32) | frag.tokens[1:]
        self.size = end
        self.bases.append(base)
        self.frags.append(frag)
        self._by_id[id(frag)] = base
        return base

    def locate(self, g: int) -> tuple[Fragment, int]:
        """The fragment holding arena node ``g`` and ``g``'s node within it."""
        i = bisect.bisect_right(self.bases, g) - 1
        return self.frags[i], g - self.bases[i]

    def child(self, nodes: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """For each ``(nodes[i], tokens[i])`` the arena node of that child, or -1."""
        query = (nodes << 32) | tokens
        pos = np.searchsorted(self.keys[: self.size], query)
        pos = np.minimum(pos, max(self.size - 1, 0))
        return np.where(self.keys[pos] == query, pos, -1)

    def children(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        s = int(self.child_start[g])
        e = s + int(self.child_count[g])
        return self.tokens[s:e], self.leaves[s:e]

    def compacted(self, live: np.ndarray) -> tuple["_Arena", np.ndarray]:
        """A new arena holding only the fragments of the arena nodes ``live``, and
        ``live``'s positions in it."""
        fresh = _Arena(max(1 << 14, self.size // 2))
        if live.size == 0:
            return fresh, live
        which = np.searchsorted(np.asarray(self.bases, dtype=np.int64), live, side="right") - 1
        moved = np.empty_like(live)
        for i in np.unique(which).tolist():
            base = fresh.add(self.frags[i])
            sel = which == i
            moved[sel] = live[sel] - self.bases[i] + base
        return fresh, moved


class BatchMatcher:
    """Per-slot fact states for one engine, stepped a batch at a time (module doc).

    ``matcher`` gives the index, the triggers and the end-of-sequence ids. Slots are
    small integers the engine chooses (its persistent batch index, or a row number);
    :meth:`add` starts a slot at the end of a prompt, :meth:`step` advances the given
    slots by the tokens they just wrote, :meth:`mask` says what they may write next.
    Not thread-safe: one engine step at a time, as engines call it.
    """

    def __init__(self, matcher: FactMatcher, *, capacity: int = 64,
                 arena_nodes: int = 1 << 20, stepper: str | None = None) -> None:
        self.matcher = matcher
        self.index = matcher.index
        self.arena = _Arena()
        self.arena_nodes = arena_nodes
        self.stepper = stepper or STEPPER
        if self.stepper not in STEPPERS:
            raise InputRefused(f"stepper {self.stepper!r}: this runtime has {list(STEPPERS)}")
        self._triggers = [np.asarray(t, dtype=np.int64) for t in matcher.triggers]
        # each trigger as its length then its ids, for the compiled step's scan
        self._trigger_table = np.asarray([x for t in matcher.triggers for x in (len(t), *t)], dtype=np.int64)
        self._hist_len = matcher.tail_length
        self._alloc_slots(capacity, 32)
        # the compiled step's outputs, reused from step to step (grown on demand)
        self._rare = np.zeros(capacity, dtype=np.int64)
        self._entering = np.zeros(capacity, dtype=np.int64)
        self._mask_rows = np.zeros(capacity, dtype=np.int64)
        self._mask_others = np.zeros(capacity, dtype=np.int64)
        self._mask_token_rows = np.zeros(4 * capacity, dtype=np.int64)
        self._mask_tokens = np.zeros(4 * capacity, dtype=np.int64)
        self.stats_rare_rows = 0  # rows stepped per row in Python (crossings, ends, net)

    # ------------------------------------------------------------------ slot storage
    def _alloc_slots(self, capacity: int, width: int) -> None:
        self.mode = np.zeros(capacity, dtype=np.int8)
        self.node = np.full(capacity, -1, dtype=np.int64)  # arena node (fact mode)
        self.ends = np.zeros(capacity, dtype=bool)  # may the fact end here (net)
        self.slow = np.zeros(capacity, dtype=bool)  # earlier facts share the prefix
        self.plen = np.zeros(capacity, dtype=np.int64)
        self.prefix = np.zeros((capacity, width), dtype=np.int64)
        self.hist = np.full((capacity, self._hist_len), -1, dtype=np.int64)
        self.done: list[list[tuple[int, ...]]] = [[] for _ in range(capacity)]
        self.shadow: list[list[tuple[int, ...]]] = [[] for _ in range(capacity)]
        self.net: list[np.ndarray | None] = [None] * capacity
        self.build: list[ServedBuild | None] = [None] * capacity

    @property
    def capacity(self) -> int:
        return self.mode.size

    def _ensure(self, slot: int) -> None:
        if slot < self.capacity:
            return
        capacity = self.capacity
        while capacity <= slot:
            capacity *= 2
        old = (self.mode, self.node, self.ends, self.slow, self.plen, self.prefix, self.hist,
               self.done, self.shadow, self.net, self.build)
        n = self.capacity
        self._alloc_slots(capacity, self.prefix.shape[1])
        for new, prev in zip((self.mode, self.node, self.ends, self.slow, self.plen,
                              self.prefix, self.hist), old[:7]):
            new[:n] = prev
        for new, prev in zip((self.done, self.shadow, self.net, self.build), old[7:]):
            new[:n] = prev

    def _widen(self, need: int) -> None:
        width = self.prefix.shape[1]
        if need <= width:
            return
        while width < need:
            width *= 2
        wider = np.zeros((self.capacity, width), dtype=np.int64)
        wider[:, : self.prefix.shape[1]] = self.prefix
        self.prefix = wider

    def _clear(self, slot: int) -> None:
        """A slot as a new request finds it: free text, no history, nothing generated."""
        self._to_free(slot)
        self.hist[slot] = -1
        self.done[slot] = []
        self.build[slot] = None

    # ------------------------------------------------------------------ slots
    def add(self, slots: Sequence[int], prompts: Sequence[Sequence[int]],
            in_fact: Sequence[bool] | None = None, *, build: ServedBuild | None = None) -> None:
        """Start each slot at the end of its prompt (the rules: the prompt is context; a
        prompt ending with the trigger starts inside a fact). ``in_fact[i]`` says the
        prompt ends *inside* a fact: the ids after its last trigger are the fact's first
        tokens (a :class:`ValueError` if they are not a prefix of a stored fact).

        Each slot reads one build from now to its end: ``build``, default the index's
        serving build at this call (every fact the request writes comes from it, even when
        another build is activated meanwhile)."""
        pinned = build or self.index.serving_build()
        starts: list[tuple[int, list[int]]] = []  # slot, fact tokens already in the prompt
        entering: list[int] = []
        for i, (slot, prompt) in enumerate(zip(slots, prompts)):
            slot = int(slot)
            self._ensure(slot)
            self._clear(slot)
            self.build[slot] = pinned
            ids = [int(t) for t in prompt]
            if in_fact is not None and in_fact[i]:
                cut = self._last_trigger_end(ids)
                if cut is None:
                    raise InputRefused("the prompt is said to end inside a fact but holds no trigger")
                head, tail = ids[:cut], ids[cut:]
            else:
                head, tail = ids, []
            recent = head[-self._hist_len:]
            if recent:
                self.hist[slot, -len(recent):] = recent
            if tail or self.matcher.ends_with_trigger(head):
                entering.append(slot)
                if tail:
                    starts.append((slot, tail))
        if entering:
            self._enter(np.asarray(entering, dtype=np.int64))
        for slot, tail in starts:  # walk the fact's first tokens as if the slot wrote them
            for tok in tail:
                self.step(np.asarray([slot]), np.asarray([tok]))
                if self.mode[slot] != FACT:
                    self._clear(slot)
                    raise InputRefused(f"the prompt's fact text ({len(tail)} tokens after the "
                                     "trigger) is not a prefix of a stored fact")

    def _last_trigger_end(self, ids: list[int]) -> int | None:
        for end in range(len(ids), 0, -1):
            if self.matcher.ends_with_trigger(ids[:end]):
                return end
        return None

    def remove(self, slots: Sequence[int]) -> None:
        for slot in slots:
            if 0 <= int(slot) < self.capacity:
                self._clear(int(slot))

    def move(self, src: int, dst: int, *, swap: bool = False) -> None:
        """Slot ``src``'s state moves to ``dst`` (``swap``: the two exchange states)."""
        self._ensure(max(src, dst))
        for arr in (self.mode, self.node, self.ends, self.slow, self.plen, self.prefix, self.hist):
            if swap:
                arr[[src, dst]] = arr[[dst, src]]
            else:
                arr[dst] = arr[src]
        for lst in (self.done, self.shadow, self.net, self.build):
            if swap:
                lst[src], lst[dst] = lst[dst], lst[src]
            else:
                lst[dst] = lst[src]
        if not swap:
            self._clear(src)

    def gather(self, parents: np.ndarray) -> None:
        """Slot ``i`` takes the state slot ``parents[i]`` had, for ``i < len(parents)``
        (beam search reorders and copies its rows)."""
        n = parents.size
        self._ensure(max(n - 1, 0))
        for arr in (self.mode, self.node, self.ends, self.slow, self.plen, self.prefix, self.hist):
            arr[:n] = arr[parents]
        p = parents.tolist()
        for lst in (self.done, self.shadow, self.net, self.build):
            taken = [lst[j] for j in p]
            lst[:n] = [list(v) if isinstance(v, list) else v for v in taken]

    # ------------------------------------------------------------------ reading a slot
    def fact_prefix(self, slot: int) -> tuple[int, ...]:
        """The current fact's tokens (empty outside a fact)."""
        return tuple(self.prefix[slot, : self.plen[slot]].tolist())

    def generated(self, slot: int) -> list[tuple[int, ...]]:
        """The facts this slot generated, in order (the one it is writing not included)."""
        return list(self.done[slot])

    def mode_of(self, slot: int) -> int:
        return int(self.mode[slot])

    # ------------------------------------------------------------------ stepping
    def step(self, slots: np.ndarray, tokens: np.ndarray) -> None:
        """Advance ``slots[i]`` by ``tokens[i]``, the token it just wrote."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        if slots.size == 0:
            return
        if self.stepper == "compiled":
            self._step_compiled(slots, tokens)
        else:
            self._step_numpy(slots, tokens)

    def _step_compiled(self, slots: np.ndarray, tokens: np.ndarray) -> None:
        """The common rows in one compiled loop; the rare ones (``_step.c``'s doc) by the
        numpy code, as :meth:`_step_numpy` steps them."""
        if tokens.size != slots.size:
            raise InputRefused(f"{slots.size} slots and {tokens.size} tokens")
        if self.arena.size > self.arena_nodes:
            self._compact()
        if self._rare.size < slots.size:
            self._rare = np.zeros(2 * slots.size, dtype=np.int64)
            self._entering = np.zeros(2 * slots.size, dtype=np.int64)
        a = self.arena
        while True:
            n_rare, n_entering = _step.step_rows(
                slots, tokens, self.mode, self.node, self.ends, self.slow, self.plen, self.prefix,
                self.hist, a.tokens, a.child_start, a.child_count, a.ends, a.external, a.link,
                self._trigger_table, self._rare, self._entering, self.prefix.shape[1], self._hist_len, a.size)
            if n_rare >= 0:
                break
            self._ensure(n_entering)  # (-1, the highest slot): nothing was changed
        if n_rare == 0 and n_entering == 0:
            return
        entering = self._entering[:n_entering].copy()
        if n_rare:
            rare = self._rare[:n_rare].copy()
            ended = self._step_facts(slots[rare], tokens[rare], np.arange(n_rare))
            if ended.any():
                cand = slots[rare][ended]
                entering = np.concatenate([entering, cand[self._trigger_ends(cand)]])
        if entering.size:
            self._enter(entering)

    def _step_numpy(self, slots: np.ndarray, tokens: np.ndarray) -> None:
        self._ensure(int(slots.max()))
        if self.arena.size > self.arena_nodes:
            self._compact()
        hist = self.hist
        hist[slots, :-1] = hist[slots, 1:]
        hist[slots, -1] = tokens
        mode = self.mode[slots]
        free_now = mode == FREE
        fact = np.flatnonzero(mode == FACT)
        if fact.size:
            free_now |= self._step_facts(slots, tokens, fact)
        if free_now.any():
            cand = slots[free_now]
            entering = cand[self._trigger_ends(cand)]
            if entering.size:
                self._enter(entering)

    def _step_facts(self, slots: np.ndarray, tokens: np.ndarray, fact: np.ndarray) -> np.ndarray:
        """Advance the fact-mode rows ``fact`` (positions in ``slots``); returns a mask over
        ``slots`` of rows whose fact ended this step (now free text)."""
        fs, ft = slots[fact], tokens[fact]
        child = self.arena.child(self.node[fs], ft)
        slow = self.slow[fs]
        for i in np.flatnonzero(slow & (child >= 0)).tolist():  # a child net of generated facts
            net = self.net[int(fs[i])]
            if net is None or not _contains(net, int(ft[i])):
                child[i] = -1
        hit = child >= 0
        ended = np.zeros(slots.size, dtype=bool)
        if hit.any():
            hs, ht, hc = fs[hit], ft[hit], child[hit]
            parents = self.node[hs]
            self._widen(int(self.plen[hs].max()) + 1)
            self.prefix[hs, self.plen[hs]] = ht
            self.plen[hs] += 1
            ext = self.arena.external[hc]
            inner = ~ext
            self.node[hs[inner]] = hc[inner]
            self.ends[hs[inner]] = self.arena.ends[hc[inner]]
            if ext.any():
                es, ec = hs[ext], hc[ext]
                target = self.arena.link[ec]
                known = target >= 0  # crossed before: the row is in the arena already
                if known.any():
                    self.node[es[known]] = target[known]
                    self.ends[es[known]] = self.arena.ends[target[known]]
                if not known.all():
                    unknown = ~known
                    self._cross(es[unknown], ht[ext][unknown], parents[ext][unknown], ec[unknown])
            # a node with nothing below and no fact ending (only a tree with ids beyond
            # the vocabulary leads there)
            stuck = hs[(self.mode[hs] == FACT) & ~self.ends[hs]
                       & (self.arena.child_count[self.node[hs]] == 0)]
            for slot in stuck.tolist():
                self._dead(slot, "no continuation left after %d fact tokens")
            resumed = hs[self.slow[hs] & (self.mode[hs] == FACT)]
            for slot in resumed.tolist():
                self._net(slot)
        if not hit.all():
            miss = np.flatnonzero(~hit)
            ms, mt = fs[miss], ft[miss]
            ending = self.ends[ms]
            for slot in ms[ending].tolist():  # the fact ended; the token is free text
                self.stats_rare_rows += 1
                self.done[slot].append(self.fact_prefix(slot))
                self._to_free(slot)
            ended[fact[miss[ending]]] = True
            for slot, tok in zip(ms[~ending].tolist(), mt[~ending].tolist()):
                if tok not in self.matcher._eos_set:  # an engine that ignored the mask
                    log.warning("token %d is not a continuation after %d fact tokens: the row is "
                                "at a dead end (end of sequence forced)", tok, int(self.plen[slot]))
                self.mode[slot] = DEAD
        return ended

    def _cross(self, slots: np.ndarray, tokens: np.ndarray, parents: np.ndarray,
               externals: np.ndarray) -> None:
        """Rows that reached an external node for the first time continue in the row stored
        under their prefix: fetched for all of them in one :meth:`advance_batch` (one round
        trip at most), then linked in the arena so later crossings are array lookups."""
        moves: list[tuple[Cursor | None, int]] = []
        for slot, tok, g in zip(slots.tolist(), tokens.tolist(), parents.tolist()):
            frag, node = self.arena.locate(g)
            n = int(self.plen[slot]) - 1
            key = encode_prefix(self.prefix[slot, :n].tolist())
            moves.append((Cursor(frag, node, key, self.build[slot]), tok))  # type: ignore[arg-type]
        self.stats_rare_rows += len(moves)
        cursors = self.index.advance_batch(moves)
        for slot, external, cursor in zip(slots.tolist(), externals.tolist(), cursors):
            if cursor is None:
                self._dead(slot, "the tree has no node for a fact prefix of %d tokens")
                continue
            g = self.arena.add(cursor.frag) + cursor.node
            self.arena.link[external] = g
            self.node[slot] = g
            self.ends[slot] = bool(self.arena.ends[g])

    def _enter(self, slots: np.ndarray) -> None:
        """``slots`` wrote a trigger: each starts a fact at the root of its build (one
        lookup per build, almost always one for all)."""
        builds = [self.build[slot] for slot in slots.tolist()]
        for build in dict.fromkeys(builds):  # distinct, in order
            group = slots[np.fromiter((b is build for b in builds), dtype=bool, count=len(builds))]
            self._enter_on(self.index.root(build), group)

    def _enter_on(self, root: Cursor, slots: np.ndarray) -> None:
        g = self.arena.add(root.frag) + root.node
        self.mode[slots] = FACT
        self.node[slots] = g
        self.ends[slots] = bool(self.arena.ends[g])
        self.plen[slots] = 0
        for slot in slots.tolist():
            self.build[slot] = root.build
            self.net[slot] = None
            if self.done[slot]:
                self.shadow[slot] = list(self.done[slot])
                self.slow[slot] = True
                self._net(slot)
            else:
                self.slow[slot] = False
        if self.arena.child_count[g] == 0 and not self.arena.ends[g]:
            for slot in slots[~self.slow[slots]].tolist():  # an empty tree: nothing to write
                self._to_free(slot)

    def _net(self, slot: int) -> None:
        """Continuations of ``slot``'s prefix net of the facts it already generated (the
        rules' "net"); the slot leaves the slow path once no generated fact shares the prefix."""
        self.stats_rare_rows += 1
        prefix = self.fact_prefix(slot)
        n = len(prefix)
        shadow = [f for f in self.shadow[slot] if f[:n] == prefix]
        self.shadow[slot] = shadow
        g = int(self.node[slot])
        if not shadow:
            self.slow[slot] = False
            self.net[slot] = None
            self.ends[slot] = bool(self.arena.ends[g])
            return
        tokens, leaves = self.arena.children(g)
        ends = bool(self.arena.ends[g]) and prefix not in shadow
        below = [f[n] for f in shadow if len(f) > n]
        if below:
            used_tok, used = np.unique(np.asarray(below, dtype=np.int64), return_counts=True)
            net = leaves.copy()
            net[np.searchsorted(tokens, used_tok)] -= used
            tokens = tokens[net > 0]
        self.net[slot] = tokens
        self.ends[slot] = ends
        if tokens.size == 0 and not ends:
            if n == 0:
                log.info("a trigger fired but all %d facts under it were already generated in "
                         "this row: it goes on as free text", len(self.done[slot]))
                self._to_free(slot)
            else:
                self._dead(slot, "no continuation left after %d fact tokens")

    def _to_free(self, slot: int) -> None:
        self.mode[slot] = FREE
        self.node[slot] = -1
        self.ends[slot] = False
        self.slow[slot] = False
        self.plen[slot] = 0
        self.shadow[slot] = []
        self.net[slot] = None

    def _dead(self, slot: int, message: str) -> None:
        log.warning(message + ": dead end (end of sequence forced)", int(self.plen[slot]))
        self.mode[slot] = DEAD

    def _trigger_ends(self, slots: np.ndarray) -> np.ndarray:
        hist = self.hist[slots]
        hit = np.zeros(slots.size, dtype=bool)
        for trig in self._triggers:
            hit |= (hist[:, hist.shape[1] - trig.size:] == trig).all(axis=1)
        return hit

    def _compact(self) -> None:
        live = np.flatnonzero(self.mode == FACT)
        arena, moved = self.arena.compacted(self.node[live])
        self.node[live] = moved
        self.arena = arena

    # ------------------------------------------------------------------ masks
    def constrained(self, slots: np.ndarray) -> np.ndarray:
        """Which of ``slots`` are constrained this step (inside a fact that may not end
        here, or at a dead end)."""
        slots = np.asarray(slots, dtype=np.int64)
        mode = self.mode[slots]
        return ((mode == FACT) & ~self.ends[slots]) | (mode == DEAD)

    def mask(self, slots: np.ndarray, vocab_size: int | None = None) -> StepMask:
        """What ``slots[i]`` (row ``i`` of the step) may write next, for every constrained
        row; ids at or beyond ``vocab_size`` (tree ids the model lacks) are left out, and a
        row left with nothing may only end the sequence."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        if self.stepper == "compiled":
            return self._mask_compiled(slots, vocab_size)
        return self._mask_numpy(slots, vocab_size)

    def _mask_compiled(self, slots: np.ndarray, vocab_size: int | None) -> StepMask:
        if self._mask_rows.size < slots.size:
            self._mask_rows = np.zeros(2 * slots.size, dtype=np.int64)
            self._mask_others = np.zeros(2 * slots.size, dtype=np.int64)
        a = self.arena
        while True:
            n_rows, n_tokens, n_others, max_token = _step.mask_rows(
                slots, self.mode, self.node, self.ends, self.slow, a.tokens, a.child_start, a.child_count,
                self._mask_rows, self._mask_token_rows, self._mask_tokens, self._mask_others, a.size)
            if n_tokens <= self._mask_tokens.size:
                break
            self._mask_token_rows = np.zeros(2 * n_tokens, dtype=np.int64)
            self._mask_tokens = np.zeros(2 * n_tokens, dtype=np.int64)
        if n_rows == 0:
            return _NO_MASK
        rows = self._mask_rows[:n_rows].copy()
        token_rows = self._mask_token_rows[:n_tokens].copy()
        tokens = self._mask_tokens[:n_tokens].copy()
        if n_others:
            parts_rows, parts_toks = [token_rows], [tokens]
            for r in self._mask_others[:n_others].tolist():
                slot = int(slots[r])
                allowed = self.matcher.eos if self.mode[slot] == DEAD else self.net[slot]
                parts_toks.append(allowed)  # type: ignore[arg-type]
                parts_rows.append(np.full(allowed.size, r, dtype=np.int64))  # type: ignore[union-attr]
                if allowed.size:  # type: ignore[union-attr]
                    max_token = max(max_token, int(allowed.max()))  # type: ignore[union-attr]
            token_rows, tokens = np.concatenate(parts_rows), np.concatenate(parts_toks)
        if vocab_size is not None and max_token >= vocab_size:
            return self._within_vocab(rows, token_rows, tokens, vocab_size)
        return StepMask(rows, token_rows, tokens)

    def _within_vocab(self, rows: np.ndarray, token_rows: np.ndarray, tokens: np.ndarray,
                      vocab_size: int) -> StepMask:
        """The ids below ``vocab_size``; a row left with nothing may only end the sequence."""
        keep = tokens < vocab_size
        token_rows, tokens = token_rows[keep], tokens[keep]
        bare = np.setdiff1d(rows, token_rows)
        if bare.size:
            eos = self.matcher.eos
            token_rows = np.concatenate([token_rows, np.repeat(bare, eos.size)])
            tokens = np.concatenate([tokens, np.tile(eos, bare.size)])
        return StepMask(rows, token_rows, tokens)

    def _mask_numpy(self, slots: np.ndarray, vocab_size: int | None) -> StepMask:
        rows = np.flatnonzero(self.constrained(slots))
        if rows.size == 0:
            return StepMask(rows, _EMPTY, _EMPTY)
        rs = slots[rows]
        mode = self.mode[rs]
        fast = (mode == FACT) & ~self.slow[rs]
        parts_rows: list[np.ndarray] = []
        parts_toks: list[np.ndarray] = []
        if fast.any():
            g = self.node[rs[fast]]
            counts = self.arena.child_count[g]
            starts = self.arena.child_start[g]
            total = int(counts.sum())
            first = np.cumsum(counts) - counts
            offsets = np.arange(total, dtype=np.int64) + np.repeat(starts - first, counts)
            parts_toks.append(self.arena.tokens[offsets])
            parts_rows.append(np.repeat(rows[fast], counts))
        for r, slot in zip(rows[~fast].tolist(), rs[~fast].tolist()):
            allowed = self.matcher.eos if self.mode[slot] == DEAD else self.net[slot]
            parts_toks.append(allowed)  # type: ignore[arg-type]
            parts_rows.append(np.full(allowed.size, r, dtype=np.int64))  # type: ignore[union-attr]
        token_rows = np.concatenate(parts_rows) if len(parts_rows) > 1 else parts_rows[0]
        tokens = np.concatenate(parts_toks) if len(parts_toks) > 1 else parts_toks[0]
        if vocab_size is not None and tokens.size and int(tokens.max()) >= vocab_size:
            return self._within_vocab(rows, token_rows, tokens, vocab_size)
        return StepMask(rows, token_rows, tokens)


def _contains(sorted_ids: np.ndarray, token: int) -> bool:
    j = int(np.searchsorted(sorted_ids, token))
    return j < sorted_ids.size and int(sorted_ids[j]) == token
