"""The fact constraint for transformers ``generate``: a thin adapter over ``FactConstraint``.

:class:`RefactxLogitsProcessor` is a ``transformers`` logits processor. The rules are the
matcher's (:mod:`refactx_index.constraint.matcher`); the states live in one
:class:`~refactx_index.engines.core.FactConstraint` whose slot ``r`` is row ``r`` of the
batch, which masks each step with one :class:`~refactx_index.constraint.batch.StepMask`, as in every
other engine. This module only finds where the prompt ends and which row of the last step
each row continues.

* **Where the prompt ends.** ``generate`` first calls the processor with the prompt
  alone (left-padded: every row's prompt ends at the same column), then with one more
  column per step. A call that does not continue the previous one (one column more,
  every row's ids minus the last equal to a row of the previous call) starts a new
  generation: its width is the prompt length. So one processor may serve several
  ``generate`` calls in turn; :meth:`RefactxLogitsProcessor.reset` forces a new start.
* **Which row continues which.** Greedy search and sampling keep their rows in place
  (one array compare tells). Beam search reorders, copies and drops rows: each row's
  parent is found by sorting the previous rows' ids (a vectorized search, no Python per
  row), and the slots are gathered from their parents.
* **One round trip per step** at most: all rows advance in one batch step.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..constraint.batch import BatchMatcher
from ..constraint.matcher import DEAD, FACT, FREE, FactMatcher, RowState
from ..errors import ConfigError, InputRefused
from ..prompting.prompt import plain_reply_finished
from ..tree.index import ServedBuild, TreeIndex
from ..vocab import CONTEXT, VocabularyLike
from .core import FactConstraint, trigger_variants

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

try:  # the optional extra: a plain class still works with transformers' processor lists
    from transformers import LogitsProcessor as _Base
except ImportError:  # pragma: no cover - depends on the install
    _Base = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

__all__ = ["DEAD", "EndOfPlainReply", "FACT", "FREE", "RefactxLogitsProcessor", "RowState", "trigger_variants"]

_INDEX = "index"  # the processor's one index, by its name in the constraint


class RefactxLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    """Restrict generation after the trigger to facts of ``index`` (see the module docs).

    ``tokenizer`` (a :class:`~refactx_index.vocab.Vocabulary`, or a tokenizer object) is
    used only to tokenize the trigger; pass ``trigger_ids`` instead to skip it. ``eos_token_id``
    is what a dead end is forced to. ``prompt_length`` fixes where the prompt ends for
    the next generation instead of taking the first call's width. ``build`` (from the
    index's ``serving_build()``) is the build every generation reads; by default each
    generation reads the build served when it starts, to its end.

    ``steps``, ``constrained_steps``, ``seconds`` (all of this processor's time),
    ``matcher_seconds`` and ``mask_seconds`` count its calls, the rows it masked and its
    time (benchmarks).
    """

    supports_continuous_batching = False

    def __init__(
        self,
        index: TreeIndex,
        tokenizer: VocabularyLike | None = None,
        *,
        eos_token_id: int | Sequence[int],
        trigger: str = CONTEXT,
        trigger_ids: Sequence[Sequence[int]] | None = None,
        prompt_length: int | None = None,
        build: ServedBuild | None = None,
    ) -> None:
        self.index = index
        self.build = build  # the build every generation reads (None: the serving one at its start)
        eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        if trigger_ids is None:
            if tokenizer is None:
                raise ConfigError("give a tokenizer (to tokenize the trigger) or trigger_ids")
            trigger_ids = trigger_variants(tokenizer, trigger)
        # the logits' width is read from each step's scores
        self.constraint = FactConstraint({_INDEX: index}, trigger_ids, eos, vocab_size=0)
        self.batch: BatchMatcher = self.constraint.matchers[_INDEX]
        self.matcher: FactMatcher = self.batch.matcher
        self._next_prompt_length = prompt_length
        self._prompt_length: int | None = None
        self._prev: np.ndarray | None = None  # the previous call's ids
        self._lock = threading.Lock()
        self.steps = 0
        self.constrained_steps = 0
        self.seconds = 0.0

    @property
    def matcher_seconds(self) -> float:
        return self.constraint.matcher_seconds

    @property
    def mask_seconds(self) -> float:
        return self.constraint.mask_seconds

    # ------------------------------------------------------------------ states
    @property
    def trigger_ids(self) -> list[tuple[int, ...]]:
        return list(self.matcher.triggers)

    @property
    def prompt_length(self) -> int | None:
        """Where the prompt of the current generation ends (``None`` before the first call)."""
        return self._prompt_length

    def reset(self, prompt_length: int | None = None) -> None:
        """Start a new generation at the next call (its prompt ends at ``prompt_length``,
        or at that call's width)."""
        with self._lock:
            self._prev = None
            self._prompt_length = None
            self._next_prompt_length = prompt_length

    def state(self, ids: Sequence[int] | np.ndarray, prompt_length: int | None = None) -> RowState:
        """The state of a row whose token ids are ``ids``, the prompt being the first
        ``prompt_length`` of them (default: the current generation's prompt length),
        computed by the reference matcher from the ids alone."""
        if prompt_length is None:
            prompt_length = self._prompt_length
            if prompt_length is None:
                raise InputRefused("no generation has started: give prompt_length")
        row = np.asarray(ids, dtype=np.int64).tolist()
        return self.matcher.scan(row, prompt_length)

    def _advance(self, ids: np.ndarray) -> None:
        """Every row's slot after this call's last column (the prompt's end on a new start)."""
        rows, width = ids.shape
        prev = self._prev
        slots = np.arange(rows)
        parents = None
        if prev is not None and width == prev.shape[1] + 1:
            if rows == prev.shape[0] and np.array_equal(ids[:, :-1], prev):
                parents = slots  # greedy, sampling: rows stay in place
            else:
                parents = _parents(prev, ids[:, :-1])  # beams: reordered, copied, dropped
        constraint = self.constraint
        if parents is not None:
            if parents is not slots:
                constraint.gather(parents)
            constraint.step(slots, ids[:, -1])
        else:  # a new generation: the prompt ends here (or where the caller said)
            prompt_length = self._next_prompt_length
            self._next_prompt_length = None
            if prompt_length is None or prompt_length >= width:
                prompt_length = width
            self._prompt_length = prompt_length
            constraint.remove(constraint.constrained_slots())
            constraint.add_rows(slots, _INDEX, ids[:, :prompt_length], build=self.build)
            for col in range(prompt_length, width):  # generated columns given at the start
                constraint.step(slots, ids[:, col])
        self._prev = ids

    # ------------------------------------------------------------------ masking
    def __call__(self, input_ids: "torch.LongTensor", scores: "torch.Tensor") -> "torch.Tensor":
        started = time.perf_counter()
        ids = np.ascontiguousarray(input_ids.detach().cpu().numpy().astype(np.int64, copy=False))
        with self._lock:
            self._advance(ids)
            masked = self.constraint.rows_masked
            self.constraint.apply(scores, np.arange(ids.shape[0]))
            self.constrained_steps += self.constraint.rows_masked - masked
        self.steps += 1
        self.seconds += time.perf_counter() - started
        return scores


def _parents(prev: np.ndarray, heads: np.ndarray) -> np.ndarray | None:
    """For each row of ``heads`` the row of ``prev`` with the same ids, or None when a
    row has none (a new generation). Rows are compared as whole byte strings, sorted once."""
    prev = np.ascontiguousarray(prev)
    heads = np.ascontiguousarray(heads)
    row_type = np.dtype((np.void, prev.dtype.itemsize * prev.shape[1]))
    keys = prev.view(row_type).ravel()
    order = np.argsort(keys, kind="stable")
    wanted = heads.view(row_type).ravel()
    pos = np.searchsorted(keys[order], wanted)
    pos = np.minimum(pos, keys.size - 1)
    parents = order[pos]
    if not np.array_equal(prev[parents], heads):
        return None
    return parents


class EndOfPlainReply(_Base):  # type: ignore[misc,valid-type]
    """A logits processor for a model prompted as plain text (no chat template, a base model:
    :func:`refactx_index.prompting.prompt.render_plain`), which has no end of turn to write
    and goes on with the next example's ``Question:`` block. Once a row's reply (``prefill``
    and the ids after column ``prompt_width``) holds a finished ``Answer:`` line (a newline
    after it) or a line that opens with ``Question:``, only the end ids ``eos`` stay allowed,
    so the row ends there, in greedy and beam search alike."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", prompt_width: int, eos: Sequence[int], prefill: str = ""):
        self.tokenizer, self.width, self.prefill = tokenizer, prompt_width, prefill
        self.eos = sorted(set(eos))
        if not self.eos:
            raise ConfigError("ending a plain-text reply needs at least one end-of-sequence id")

    def finished(self, text: str) -> bool:
        """Whether the reply text ``text`` is over: a finished Answer line or a new question."""
        return plain_reply_finished(text)

    def __call__(self, input_ids: "torch.LongTensor", scores: "torch.Tensor") -> "torch.Tensor":
        if input_ids.shape[1] <= self.width:
            return scores
        for r in range(input_ids.shape[0]):
            self.mask_row(input_ids[r, self.width:].tolist(), scores[r])
        return scores

    def mask_row(self, generated: Sequence[int], scores: "torch.Tensor") -> None:
        """Leave, in place, only the end ids in the next-token ``scores`` of one row whose
        reply so far is ``generated``, when that reply is over."""
        if self.finished(self.prefill + self.tokenizer.decode(list(generated), skip_special_tokens=True)):
            kept = scores[self.eos].clone()
            scores.fill_(float("-inf"))
            # the end ids keep their scores (a beam's ranking), or 0 where all were masked
            scores[self.eos] = kept if bool((kept > float("-inf")).any()) else 0.0
