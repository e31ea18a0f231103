"""The fact matcher: which tokens a row may write next, engine-neutral.

A generation engine (an adapter in ``refactx_index.engines``) owns the model
and the scores; the matcher owns the rules. Per row it keeps a :class:`RowState`, and
per step it advances every row by the token the row just wrote -- all rows of a step
in one :meth:`FactMatcher.step_batch` call, which asks the index for the rows it lacks
in at most one round trip. Where a row is constrained, :meth:`FactMatcher.allowed`
gives the sorted token ids it may write; the engine masks everything else.

The rules, exactly:

* **The prompt is context.** A row's state starts at the end of its prompt. Triggers,
  facts and anything else inside the prompt never constrain the row, and facts the
  prompt writes (worked examples) are not counted as generated. The one exception: a
  prompt that *ends* with the trigger (``"...\\nFact:"``) starts the row inside a fact.
* **Trigger.** Outside a fact, a row enters a fact when the token it just wrote
  completes a trigger sequence (the last ids of the row, which may reach back into the
  prompt, equal one of the trigger's tokenizations).
* **Inside a fact** the allowed tokens are the children of the fact's prefix in the
  tree, *net of the facts this row already generated*: a child whose facts were all
  generated is removed, and a prefix that is itself a generated fact cannot end there.
* **End or continue.** Where the prefix is a fact (net ``ends``), the step is not
  constrained: a tree child continues the fact; any other token ends it (the fact is
  recorded as generated) and is free text, which may start a new trigger.
* **Nothing left.** If every fact was already generated when a trigger fires (nothing
  of the fact is written yet), the row goes on as free text, unconstrained: that is
  sound, the text so far is whatever the model wrote. Inside a fact this cannot happen
  (a prefix is only reached through a child with facts left below it), except when the
  tree holds ids the model's vocabulary lacks: then the row is at a dead end and only
  the end-of-sequence ids are allowed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ConfigError, InputRefused
from ..tree.index import Cursor, ServedBuild, TreeIndex

log = logging.getLogger(__name__)

FREE, FACT, DEAD = 0, 1, 2
_MODE_NAMES = {FREE: "free", FACT: "fact", DEAD: "dead"}

Fact = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RowState:
    """Where a row stands after its last token.

    ``prefix`` holds the current fact's tokens (fact mode); ``done`` the facts this row
    generated, in order; ``allowed``/``ends`` the net continuations of ``prefix``.
    ``cursor`` is the tree node ``prefix`` reached: the next step advances it by one token.
    """

    mode: int
    prefix: Fact = ()
    done: tuple[Fact, ...] = ()
    cursor: Cursor | None = None
    allowed: np.ndarray | None = None
    ends: bool = False

    @property
    def constrained(self) -> bool:
        """Whether this step's tokens are restricted (inside a fact that may not end
        here, or at a dead end)."""
        return self.mode == DEAD or (self.mode == FACT and not self.ends)

    def __repr__(self) -> str:
        allowed = 0 if self.allowed is None else self.allowed.size
        return (f"RowState({_MODE_NAMES[self.mode]}, prefix={self.prefix}, done={len(self.done)}, "
                f"allowed={allowed}, ends={self.ends})")


FREE_START = RowState(FREE)


class FactMatcher:
    """Applies the rules of the module doc over ``index`` for any engine.

    ``trigger_ids``: the trigger's tokenizations (a row enters a fact where one of them
    ends); ``eos_ids``: what a dead end is forced to. Stateless between calls: states
    are values the engine keeps per row, so one matcher may serve many rows and threads.
    """

    def __init__(self, index: TreeIndex, trigger_ids: Sequence[Sequence[int]],
                 eos_ids: Sequence[int]) -> None:
        self.index = index
        self.triggers: list[Fact] = sorted({tuple(int(t) for t in ids) for ids in trigger_ids if len(ids)},
                                           key=len)
        if not self.triggers:
            raise ConfigError("the trigger tokenizes to nothing")
        eos = sorted({int(e) for e in eos_ids})
        if not eos:
            raise ConfigError("an end-of-sequence id is required: a dead end is forced to end")
        self.eos = np.asarray(eos, dtype=np.int64)
        self._eos_set = frozenset(eos)
        self.tail_length = len(self.triggers[-1])

    def ends_with_trigger(self, ids: Sequence[int]) -> bool:
        tail = tuple(int(t) for t in ids[-self.tail_length:])
        return any(tail[-len(t):] == t for t in self.triggers if len(tail) >= len(t))

    # ------------------------------------------------------------------ states
    def start_batch(self, prompts: Sequence[Sequence[int]], *,
                    build: ServedBuild | None = None) -> list[RowState]:
        """The states at the end of each prompt (fact mode only where it ends with the trigger).
        Facts start at the root of ``build`` (default: the index's serving build)."""
        entering = [i for i, p in enumerate(prompts) if self.ends_with_trigger(p)]
        states = [FREE_START] * len(prompts)
        if entering:
            roots = self.index.advance_batch([(None, 0)] * len(entering), build=build)
            for i, root in zip(entering, roots):
                states[i] = self._fact_state(root, (), ())  # type: ignore[arg-type]
        return states

    def step_batch(self, states: Sequence[RowState], tokens: Sequence[int],
                   tails: Sequence[Sequence[int]], *, build: ServedBuild | None = None) -> list[RowState]:
        """Each row's state after writing ``tokens[i]``; ``tails[i]`` are the row's last
        ids, ending with that token (for the trigger). One index round trip at most. A
        fact in progress stays on its cursor's build; a new one starts on ``build``."""
        out: list[RowState | None] = [None] * len(states)
        moves: list[tuple[Cursor | None, int]] = []
        pending: list[tuple[int, Fact, tuple[Fact, ...]]] = []  # row, prefix, done
        for i, (st, tok) in enumerate(zip(states, tokens)):
            tok = int(tok)
            done = st.done
            if st.mode == FACT:
                allowed = st.allowed
                j = int(np.searchsorted(allowed, tok))
                if j < allowed.size and allowed[j] == tok:
                    moves.append((st.cursor, tok))
                    pending.append((i, st.prefix + (tok,), done))
                    continue
                if not st.ends:  # a forced end of sequence, or an engine that ignored the mask
                    if tok not in self._eos_set:
                        log.warning("token %d is not a continuation after %d fact tokens: the row "
                                    "is at a dead end (end of sequence forced)", tok, len(st.prefix))
                    out[i] = RowState(DEAD, st.prefix, done)
                    continue
                done = done + (st.prefix,)  # the fact ended; ``tok`` is free text
            elif st.mode == DEAD:
                out[i] = st
                continue
            if self.ends_with_trigger(tails[i]):
                moves.append((None, 0))
                pending.append((i, (), done))
            else:
                out[i] = st if done is st.done and st.mode == FREE else RowState(FREE, (), done)
        if moves:
            for (i, prefix, done), cursor in zip(pending, self.index.advance_batch(moves, build=build)):
                if cursor is None:  # the mask allowed a token the tree does not hold
                    log.warning("the tree has no node for a fact prefix of %d tokens: dead end",
                                len(prefix))
                    out[i] = RowState(DEAD, prefix, done)
                else:
                    out[i] = self._fact_state(cursor, prefix, done)
        return out  # type: ignore[return-value]

    def scan(self, ids: Sequence[int], prompt_length: int, *,
             build: ServedBuild | None = None) -> RowState:
        """The state of a row from scratch: ``ids[:prompt_length]`` is the prompt, the rest
        was generated. One index round trip per generated token at most. Read on ``build``
        (default: the serving build at this call) from first token to last."""
        ids = [int(t) for t in ids]
        if not 0 <= prompt_length <= len(ids):
            raise InputRefused(f"prompt_length {prompt_length} outside [0, {len(ids)}]")
        build = build or self.index.serving_build()
        st = self.start_batch([ids[:prompt_length]], build=build)[0]
        for j in range(prompt_length, len(ids)):
            st = self.step_batch([st], [ids[j]], [ids[max(0, j + 1 - self.tail_length): j + 1]],
                                 build=build)[0]
        return st

    def allowed(self, state: RowState) -> np.ndarray | None:
        """Sorted ids the row may write next, or ``None`` when the step is not constrained."""
        if state.mode == FACT and not state.ends:
            return state.allowed
        if state.mode == DEAD:
            return self.eos
        return None

    # ------------------------------------------------------------------ internals
    def _fact_state(self, cursor: Cursor, prefix: Fact, done: tuple[Fact, ...]) -> RowState:
        """A fact-mode state at ``cursor`` with its continuations net of ``done``."""
        answer = cursor.next_tokens()
        tokens, ends = answer.tokens, answer.ends
        if done:
            n = len(prefix)
            if prefix in done:
                ends = False
            below = [f[n] for f in done if len(f) > n and f[:n] == prefix]
            if below:
                used_tok, used = np.unique(np.asarray(below, dtype=np.int64), return_counts=True)
                net = answer.leaves.copy()
                net[np.searchsorted(tokens, used_tok)] -= used
                tokens = tokens[net > 0]
        if tokens.size == 0 and not ends:
            if not prefix:
                log.info("a trigger fired but all %d facts under it were already generated in "
                         "this row: it goes on as free text", len(done))
                return RowState(FREE, (), done)
            log.warning("no continuation left after %d fact tokens: dead end (end of sequence "
                        "forced)", len(prefix))
            return RowState(DEAD, prefix, done)
        return RowState(FACT, prefix, done, cursor, tokens, bool(ends))
