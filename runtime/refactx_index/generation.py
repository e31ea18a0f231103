"""Constrained generation for transformers: a thin adapter over :mod:`refactx_index.matcher`.

:class:`RefactxLogitsProcessor` is a ``transformers`` logits processor. The rules (the
prompt is context; a row enters a fact at a trigger it writes, or at a trigger that
ends the prompt; facts net of those already generated) are the matcher's; this module
only finds where the prompt ends, keeps each row's state from one step to the next,
and masks the scores.

* **Where the prompt ends.** ``generate`` first calls the processor with the prompt
  alone (left-padded: every row's prompt ends at the same column), then with one more
  token per row per step. A call that does not continue the previous one (one column
  more, every row's ids minus the last equal to a row of the previous call) starts a
  new generation: its width is the prompt length. So one processor may serve several
  ``generate`` calls in turn; :meth:`RefactxLogitsProcessor.reset` forces a new start.
* **State per row** is a function of the row's ids: the previous step's states are
  kept by the bytes of their ids, so beam search may reorder, copy or drop rows freely.
* **One round trip per step**: all rows advance in one ``FactMatcher.step_batch``.
* **Masks** are written in place on constrained rows only. On CPU the scores are
  written through a numpy view (gather the allowed scores, ``fill(-inf)``, scatter them
  back) on the calling thread: a ``torch`` fill of a row wider than 32,768 columns goes
  through the intra-op thread pool, which costs milliseconds on a busy machine
  (``bench/bench_masks.py``). Other devices use the same three steps in torch.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .index import TreeIndex
from .matcher import DEAD, FACT, FREE, FactMatcher, RowState
from .vocab import CONTEXT

if TYPE_CHECKING:
    import torch

try:  # the optional extra: a plain class still works with transformers' processor lists
    from transformers import LogitsProcessor as _Base
except ImportError:  # pragma: no cover - depends on the install
    _Base = object  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

__all__ = ["DEAD", "FACT", "FREE", "RefactxLogitsProcessor", "RowState", "trigger_variants"]


def trigger_variants(tokenizer: object, trigger: str) -> list[list[int]]:
    """The ids a model may write for ``trigger``: alone, after a space, after a newline.

    The newline variant is read as a continuation (the ids of ``"\\n" + trigger`` after
    those of ``"\\n"``): SentencePiece vocabularies write ``Fact`` without the word-start
    mark there, which neither of the other two encodings gives.
    """
    from .memory import encode_texts

    alone, spaced, newline, nl = encode_texts(tokenizer, [trigger, " " + trigger, "\n" + trigger, "\n"])
    variants = [alone, spaced]
    if newline[: len(nl)] == nl and len(newline) > len(nl):
        variants.append(newline[len(nl):])
    return variants


class RefactxLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    """Restrict generation after the trigger to facts of ``index`` (see the module docs).

    ``tokenizer`` (a ``tokenizers.Tokenizer`` or a transformers tokenizer) is used only
    to tokenize the trigger; pass ``trigger_ids`` instead to skip it. ``eos_token_id``
    is what a dead end is forced to. ``prompt_length`` fixes where the prompt ends for
    the next generation instead of taking the first call's width.

    ``steps``, ``constrained_steps`` and ``seconds`` count this processor's calls, the
    rows it masked and its own time (for benchmarks).
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
        prompt_length: int | None = None,
    ) -> None:
        self.index = index
        eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        if trigger_ids is None:
            if tokenizer is None:
                raise ValueError("give a tokenizer (to tokenize the trigger) or trigger_ids")
            trigger_ids = trigger_variants(tokenizer, trigger)
        self.matcher = FactMatcher(index, trigger_ids, eos)
        self._next_prompt_length = prompt_length
        self._prompt_length: int | None = None
        self._states: dict[bytes, RowState] = {}
        self._width = -1
        self._lock = threading.Lock()
        self.steps = 0
        self.constrained_steps = 0
        self.seconds = 0.0

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
            self._states = {}
            self._width = -1
            self._prompt_length = None
            self._next_prompt_length = prompt_length

    def state(self, ids: Sequence[int] | np.ndarray, prompt_length: int | None = None) -> RowState:
        """The state of a row whose token ids are ``ids``, the prompt being the first
        ``prompt_length`` of them (default: the current generation's prompt length).
        A row of the last step is answered from memory, any other is scanned."""
        row = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
        if prompt_length is None:
            prompt_length = self._prompt_length
            if prompt_length is None:
                raise ValueError("no generation has started: give prompt_length")
            with self._lock:
                known = self._states.get(row.tobytes())
            if known is not None:
                return known
        return self.matcher.scan(row.tolist(), prompt_length)

    def _advance(self, ids: np.ndarray) -> list[RowState]:
        """Every row's state after this call's last column (the prompt's end on a new start)."""
        width = ids.shape[1]
        keys = [ids[r].tobytes() for r in range(ids.shape[0])]
        parents = [self._states.get(k[:-8]) for k in keys] if width == self._width + 1 else []
        if parents and all(p is not None for p in parents):
            tails = ids[:, max(0, width - self.matcher.tail_length):].tolist()
            states = self.matcher.step_batch(parents, ids[:, -1].tolist(), tails)  # type: ignore[arg-type]
        else:  # a new generation: the prompt ends here (or where the caller said)
            prompt_length = self._next_prompt_length
            self._next_prompt_length = None
            if prompt_length is None or prompt_length >= width:
                self._prompt_length = width
                states = self.matcher.start_batch(ids.tolist())
            else:
                self._prompt_length = prompt_length
                states = [self.matcher.scan(row, prompt_length) for row in ids.tolist()]
        self._states = dict(zip(keys, states))
        self._width = width
        return states

    # ------------------------------------------------------------------ masking
    def __call__(self, input_ids: "torch.LongTensor", scores: "torch.Tensor") -> "torch.Tensor":
        started = time.perf_counter()
        ids = input_ids.detach().cpu().numpy().astype(np.int64, copy=False)
        with self._lock:
            states = self._advance(ids)
        vocab = scores.shape[-1]
        rows: list[int] = []
        cols: list[np.ndarray] = []
        for r, st in enumerate(states):
            allowed = self.matcher.allowed(st)
            if allowed is None:
                continue
            if allowed.size and allowed[-1] >= vocab:  # tree ids beyond the model's scores
                allowed = allowed[allowed < vocab]
            if allowed.size == 0:
                allowed = self.matcher.eos
            rows.append(r)
            cols.append(allowed)
        if rows:
            _mask_rows(scores, rows, cols)
        self.steps += 1
        self.constrained_steps += len(rows)
        self.seconds += time.perf_counter() - started
        return scores


def _mask_rows(scores: "torch.Tensor", rows: list[int], cols: list[np.ndarray]) -> None:
    """Set ``scores[r]`` to ``-inf`` except at ``cols[i]`` for each ``rows[i]``, in place."""
    import torch

    if scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64, torch.float16):
        view = scores.detach().numpy()  # shares the tensor's memory
        for r, allowed in zip(rows, cols):
            row = view[r]
            kept = row[allowed]
            row.fill(-np.inf)
            row[allowed] = kept
        return
    for r, allowed in zip(rows, cols):
        index = torch.from_numpy(allowed).to(scores.device)
        kept = scores[r, index]
        scores[r].fill_(float("-inf"))
        scores[r, index] = kept
