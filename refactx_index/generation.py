"""Constrained generation for transformers: after the trigger, only stored facts.

:class:`RefactxLogitsProcessor` is a ``transformers`` logits processor. The state of
a row is a pure function of that row's token ids, so batches, beam search (beams
are reordered freely between steps) and sampling need no patching and no global
state; states are cached per processor, keyed by the row's ids.

The rules, exactly:

* **Trigger.** A row enters a fact when its ids end with one of the trigger
  sequences (``trigger`` tokenized alone and after a space, or ``trigger_ids``),
  whether the trigger was generated or ends the prompt. Triggers are looked for
  only outside a fact.
* **Inside a fact** the allowed tokens are the children of the fact's prefix in
  the tree, *net of the facts already completed in the same row*: a child whose
  facts have all been generated is removed, and a prefix that is itself an already
  generated fact cannot end there again.
* **End or continue.** Where the prefix is a fact (net ``ends``), the fact may end:
  the constraint is released for that step, so every token is allowed. A tree child
  continues the fact; any other token completes it (recorded as generated) and is
  free text, which may start a new trigger.
* **Dead end.** If no continuation is left (every fact under the prefix was already
  generated, or the prompt wrote a fact the tree does not hold), the row is forced
  to end: only ``eos_token_id`` is allowed and a warning is logged. The constraint is
  never released in the middle of a fact: a row at a dead end stays there (forced
  EOS) until a new trigger, so a prompt should write only stored facts after a
  trigger.
* **Cost.** Only constrained rows are touched: their scores are set to ``-inf``
  except on the allowed tokens, in place: one gather and one indexed assignment over
  all rows, and one ``fill_`` per constrained row (no Python loop over the vocabulary).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .index import TreeIndex
from .vocab import CONTEXT

if TYPE_CHECKING:
    import torch

try:  # the optional extra: a plain class still works with transformers' processor lists
    from transformers import LogitsProcessor as _Base
except ImportError:  # pragma: no cover - depends on the install
    _Base = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

FREE, FACT, DEAD = 0, 1, 2
_MODE_NAMES = {FREE: "free", FACT: "fact", DEAD: "dead"}


class FactState:
    """Where a row stands: free text, inside a fact, or at a dead end.

    ``prefix`` is the current fact's tokens so far; ``done`` the facts completed in
    the row; ``allowed``/``ends`` the net continuations of ``prefix`` (fact mode).
    """

    __slots__ = ("mode", "prefix", "done", "allowed", "ends")

    def __init__(self, mode: int, prefix: tuple[int, ...], done: frozenset,
                 allowed: np.ndarray | None = None, ends: bool = False) -> None:
        self.mode = mode
        self.prefix = prefix
        self.done = done
        self.allowed = allowed
        self.ends = ends

    @property
    def constrained(self) -> bool:
        """Whether this step's tokens are restricted (a fact that may not end here, or a dead end)."""
        return self.mode == DEAD or (self.mode == FACT and not self.ends)

    def __repr__(self) -> str:
        return (f"FactState({_MODE_NAMES[self.mode]}, prefix={self.prefix}, done={len(self.done)}, "
                f"allowed={0 if self.allowed is None else self.allowed.size}, ends={self.ends})")


_START = FactState(FREE, (), frozenset())


class RefactxLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    """Restrict generation after the trigger to facts of ``index`` (see the module doc).

    ``tokenizer`` (a ``tokenizers.Tokenizer`` or a transformers tokenizer) is used only
    to tokenize the trigger; pass ``trigger_ids`` instead to skip it.
    ``eos_token_id`` is what a dead end is forced to.
    """

    supports_continuous_batching = False

    def __init__(
        self,
        index: TreeIndex,
        tokenizer: object | None = None,
        *,
        eos_token_id: int | Sequence[int],
        trigger: str = CONTEXT,
        trigger_ids: Sequence[Sequence[int]] | None = None,
        max_states: int = 4096,
    ) -> None:
        self.index = index
        eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        if not eos:
            raise ValueError("eos_token_id is required: a dead end is forced to end the sequence")
        self._eos = np.asarray(sorted(set(int(e) for e in eos)), dtype=np.int64)
        self._eos_set = frozenset(self._eos.tolist())
        if trigger_ids is None:
            if tokenizer is None:
                raise ValueError("give a tokenizer (to tokenize the trigger) or trigger_ids")
            from .memory import encode_texts

            trigger_ids = encode_texts(tokenizer, [trigger, " " + trigger])
        self._triggers = sorted({tuple(int(t) for t in ids) for ids in trigger_ids if len(ids)},
                                key=len)
        if not self._triggers:
            raise ValueError("the trigger tokenizes to nothing")
        self._states: OrderedDict[bytes, FactState] = OrderedDict()
        self._max_states = max_states
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ states
    @property
    def trigger_ids(self) -> list[tuple[int, ...]]:
        return list(self._triggers)

    def state(self, ids: Sequence[int] | np.ndarray) -> FactState:
        """The state of a row whose token ids are ``ids`` (cached)."""
        row = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
        return self._state_of(row)

    def _state_of(self, row: np.ndarray) -> FactState:
        key = row.tobytes()
        with self._lock:
            st = self._states.get(key)
            if st is not None:
                self._states.move_to_end(key)
                return st
            parent = self._states.get(key[:-8]) if row.size else None
        if parent is not None:
            tail_len = min(row.size, len(self._triggers[-1]))
            st = self._advance(parent, row[-tail_len:].tolist())
        else:
            st = self._scan(row.tolist())
        with self._lock:
            self._states[key] = st
            while len(self._states) > self._max_states:
                self._states.popitem(last=False)
        return st

    def _scan(self, seq: list[int]) -> FactState:
        st = _START
        for i in range(len(seq)):
            st = self._advance(st, seq[max(0, i + 1 - len(self._triggers[-1])): i + 1])
        return st

    def _advance(self, st: FactState, tail: list[int]) -> FactState:
        """The state after appending ``tail[-1]`` (``tail``: the last ids, for the trigger)."""
        tok = tail[-1]
        done = st.done
        if st.mode == FACT:
            allowed = st.allowed
            i = int(np.searchsorted(allowed, tok))
            if i < allowed.size and allowed[i] == tok:
                return self._enter(st.prefix + (tok,), done)
            if not st.ends:  # a forced EOS, or a prompt that writes a fact the tree lacks
                if tok not in self._eos_set:
                    log.warning("token %d leaves the tree after %d fact tokens: the row is at a "
                                "dead end (end of sequence forced until the next trigger)",
                                tok, len(st.prefix))
                return FactState(DEAD, st.prefix, done)
            done = done | {st.prefix}  # the fact ended; ``tok`` is free text
        for trig in self._triggers:
            if len(tail) >= len(trig) and tuple(tail[-len(trig):]) == trig:
                return self._enter((), done)
        if st.mode == DEAD or (st.mode == FREE and done is st.done):
            return st
        return FactState(FREE, (), done)

    def _enter(self, prefix: tuple[int, ...], done: frozenset) -> FactState:
        """A fact-mode state with its net continuations computed."""
        answer = self.index.next_tokens(prefix)
        tokens, ends = answer.tokens, answer.ends
        if done:
            n = len(prefix)
            if prefix in done:
                ends = False
            below = [f[n] for f in done if len(f) > n and f[:n] == prefix]
            if below:
                used_tok, used = np.unique(np.asarray(below, dtype=np.int64), return_counts=True)
                pos = np.searchsorted(tokens, used_tok)
                net = answer.leaves.copy()
                net[pos] -= used
                tokens = tokens[net > 0]
        st = FactState(FACT, prefix, done, tokens, bool(ends))
        if tokens.size == 0 and not ends:
            log.warning("constrained generation reached a dead end after %d fact tokens "
                        "(%d facts already generated): forcing end of sequence",
                        len(prefix), len(done))
        return st

    # ------------------------------------------------------------------ masking
    def __call__(self, input_ids: "torch.LongTensor", scores: "torch.Tensor") -> "torch.Tensor":
        import torch

        ids = input_ids.detach().cpu().numpy()
        vocab = scores.shape[-1]
        rows: list[int] = []
        cols: list[np.ndarray] = []
        for r in range(ids.shape[0]):
            st = self._state_of(ids[r])
            if not st.constrained:
                continue
            allowed = st.allowed if st.mode == FACT else self._eos
            if allowed.size and allowed[-1] >= vocab:
                allowed = allowed[allowed < vocab]
            if allowed.size == 0:  # dead end, or tree tokens beyond the model's vocabulary
                allowed = self._eos
            rows.append(r)
            cols.append(allowed)
        if not rows:
            return scores
        device = scores.device
        col_t = torch.from_numpy(np.concatenate(cols)).to(device)
        row_t = torch.from_numpy(
            np.repeat(np.asarray(rows, dtype=np.int64), [c.size for c in cols])
        ).to(device)
        kept = scores[row_t, col_t]
        # one fill per constrained row (a loop over rows, not the vocabulary): a row
        # view's fill_ stays on the calling thread, where index_fill_ over rows goes
        # through the intra-op pool and costs milliseconds on a busy CPU
        for r in rows:
            scores[r].fill_(float("-inf"))
        scores[row_t, col_t] = kept
        return scores
