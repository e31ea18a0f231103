"""The fact constraint as an SGLang grammar backend.

SGLang lets a registered grammar backend outrank its built-in ones and fills each step's
masks while the forward pass runs. :func:`register` registers this one under a name
(default ``"refactx"``) for the indexes it serves::

    from refactx_index.engines.sglang import register
    register({"sample": "/data/sample.rfx"})       # in the process that runs SGLang's scheduler
    # then: --grammar-backend refactx (ServerArgs(grammar_backend="refactx"))

A request asks for the constraint through SGLang's ``ebnf`` sampling parameter:
``{"ebnf": "refactx:sample"}`` (``"refactx:sample:in_fact"`` when the prompt ends inside a
fact). Requests without a grammar are left alone; a name the backend does not serve is an
invalid grammar, which SGLang answers with an error.

How SGLang's grammar calls map onto the batch matcher (:mod:`refactx_index.constraint.batch`): each
request's grammar object holds one slot of the index's :class:`~refactx_index.constraint.batch.BatchMatcher`,
started at the end of its prompt (the backend's grammar key carries the prompt's last ids,
so a prompt ending with the trigger starts inside a fact); ``accept_token`` steps the slot;
``rollback`` replays the request's tokens less the last ``k`` (speculative decoding);
``fill_vocab_mask_batched`` collects every listed row's allowed ids in one matcher call and
writes them into an int32 bitmask (xgrammar's layout: bit ``t % 32`` of word ``t // 32``, all
ones for an unconstrained row); ``apply_vocab_mask`` sets the forbidden logits to ``-inf``
(xgrammar's kernel where importable, else a few torch operations).
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..constraint.batch import BatchMatcher
from ..constraint.matcher import FactMatcher
from ..errors import ConfigError
from ..tree.index import TreeIndex, check_vocabulary
from ..vocab import Vocabulary, VocabularyLike, as_vocabulary, open_model_vocabulary
from .core import index_triggers, open_indexes

from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarRow,
    InvalidGrammarObject,
    register_grammar_backend,
)

log = logging.getLogger(__name__)

__all__ = ["BACKEND_NAME", "FactGrammar", "FactGrammarBackend", "register", "sglang_vocabulary"]

BACKEND_NAME = "refactx"
KEY_PREFIX = "refactx:"
_TAIL_MARK = "\x1f"  # separates a grammar key from the prompt ids the backend appends to it


def register(indexes: Mapping[str, str | TreeIndex], *, name: str = BACKEND_NAME,
             trigger: str | None = None) -> None:
    """Register the backend with SGLang under ``name`` (``--grammar-backend NAME``):
    ``indexes`` maps a request's index name to an index file, a PostgreSQL DSN (as
    :func:`~refactx_index.engines.core.open_indexes` reads them) or an open index."""
    specs = {k: v for k, v in indexes.items() if isinstance(v, str)}
    opened = {**open_indexes(specs), **{k: v for k, v in indexes.items() if not isinstance(v, str)}}

    def create(server_args: Any, tokenizer: VocabularyLike, vocab_size: int, eos_token_ids: Any = None) -> "FactGrammarBackend":
        return FactGrammarBackend(opened, sglang_vocabulary(server_args, tokenizer, vocab_size, eos_token_ids),
                                  trigger=trigger)

    register_grammar_backend(name, create)


def sglang_vocabulary(server_args: Any, tokenizer: VocabularyLike, vocab_size: int,
                      eos_token_ids: Sequence[int] | None) -> Vocabulary:
    """The model's :class:`~refactx_index.vocab.Vocabulary` from what SGLang hands a grammar
    backend: the model directory's (end ids of the model config and the generation config, as
    every engine takes them) where ``server_args`` names a local one, else its tokenizer's; its
    end ids joined with SGLang's ``eos_token_ids``, its mask as wide as SGLang's ``vocab_size``."""
    model = getattr(server_args, "tokenizer_path", None) or getattr(server_args, "model_path", None)
    if model and (Path(model) / "config.json").is_file() and (Path(model) / "tokenizer.json").is_file():
        vocabulary = open_model_vocabulary(model)
    else:
        vocabulary = as_vocabulary(tokenizer)
    eos = tuple(sorted({*vocabulary.eos_ids, *(int(e) for e in (eos_token_ids or ()))}))
    return replace(vocabulary, eos_ids=eos, model_vocab_size=int(vocab_size))


class FactGrammarBackend(BaseGrammarBackend):
    """One :class:`BatchMatcher` per index; grammar objects are slots in them."""

    def __init__(self, indexes: Mapping[str, TreeIndex], vocabulary: Vocabulary, *,
                 trigger: str | None = None) -> None:
        """``vocabulary``: the model's (:func:`sglang_vocabulary`); its end ids end a row and
        its ``logits_size`` is the mask's width, as :meth:`FactConstraint.for_vocabulary
        <refactx_index.engines.core.FactConstraint.for_vocabulary>` takes them."""
        super().__init__()
        if not indexes:
            raise ConfigError("no index to constrain by")
        eos = sorted(vocabulary.eos_ids)
        if not eos:
            raise ConfigError(f"vocabulary {vocabulary.name!r} names no end-of-sequence id: "
                              "a dead end could not be ended")
        for name, ix in indexes.items():
            check_vocabulary(ix, vocabulary)
        triggers = index_triggers(vocabulary, indexes, trigger)
        self.vocabulary = vocabulary
        self.vocab_size = vocabulary.logits_size
        self.matchers = {name: BatchMatcher(FactMatcher(ix, triggers[name], eos)) for name, ix in indexes.items()}
        self.lock = threading.Lock()  # grammars are made on SGLang's worker threads, stepped on its scheduler's
        self._free: dict[str, list[int]] = {name: [] for name in self.matchers}
        self._next: dict[str, int] = dict.fromkeys(self.matchers, 0)
        # slots of collected grammars: appended by their finalizers (any thread, any time),
        # cleared under the lock before the next slot is taken
        self._released: list[tuple[str, int]] = []

    # ------------------------------------------------------------------ keys and grammars
    def get_request_grammar_key(self, key, *, input_ids, thinking_budget):
        """A fact grammar depends on how the prompt ends (it may end with the trigger): its
        key carries the prompt's last ids."""
        key_type, key_string = key
        name = _index_name(key_string)
        if name not in self.matchers:
            return key
        tail = list(input_ids)[-self._tail_length(name, key_string):]
        return key_type, key_string + _TAIL_MARK + ",".join(map(str, tail))

    def _tail_length(self, name: str, key_string: str) -> int:
        if key_string.endswith(":in_fact"):  # the fact's first ids follow the trigger: the whole prompt
            return 1 << 30
        return self.matchers[name].matcher.tail_length

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        head, _, tail = key_string.partition(_TAIL_MARK)
        name = _index_name(head)
        if name is None:
            return InvalidGrammarObject(f"the refactx backend serves grammars {KEY_PREFIX}NAME, not {head[:80]!r}")
        if name not in self.matchers:
            return InvalidGrammarObject(f"unknown index {name!r}; this backend serves {sorted(self.matchers)}")
        prompt = [int(t) for t in tail.split(",") if t]
        in_fact = head.endswith(":in_fact")
        if in_fact:  # refused here, in the worker, rather than at the first step
            probe = FactMatcher(self.matchers[name].index, self.matchers[name].matcher.triggers,
                                self.matchers[name].matcher.eos.tolist())
            check = BatchMatcher(probe, capacity=1)
            try:
                check.add([0], [prompt], in_fact=[True])
            except ValueError as exc:
                return InvalidGrammarObject(str(exc))
        return FactGrammar(self, name, prompt, in_fact)

    def dispatch_fallback(self, key_type: str, key_string: str) -> BaseGrammarObject:
        return InvalidGrammarObject(f"the refactx backend serves ebnf grammars {KEY_PREFIX}NAME, not {key_type}")

    # ------------------------------------------------------------------ slots
    def _take(self, name: str) -> int:
        """A free slot of ``name``'s matcher (the caller holds the lock)."""
        while self._released:
            held, slot = self._released.pop()
            self.matchers[held].remove([slot])
            self._free[held].append(slot)
        free = self._free[name]
        if free:
            return free.pop()
        self._next[name] += 1
        return self._next[name] - 1

    # ------------------------------------------------------------------ masks
    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device) -> torch.Tensor:
        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        apply_bitmask(logits, vocab_mask)


def _index_name(key_string: str) -> str | None:
    if not key_string.startswith(KEY_PREFIX):
        return None
    name = key_string[len(KEY_PREFIX):].partition(_TAIL_MARK)[0]
    return name[: -len(":in_fact")] if name.endswith(":in_fact") else name


class FactGrammar(BaseGrammarObject):
    """One request's fact constraint: a slot of its index's batch matcher, taken on first
    use (SGLang copies a cached grammar for each request and makes them on worker threads)
    and given back when the object is collected."""

    def __init__(self, backend: FactGrammarBackend, index: str, prompt: list[int], in_fact: bool) -> None:
        super().__init__()
        self.backend = backend
        self.index = index
        self.prompt = prompt
        self.in_fact = in_fact
        self.tokens: list[int] = []  # what the request wrote (rollback replays them)
        self.slot: int | None = None

    def _slot(self) -> int:
        if self.slot is None:
            backend = self.backend
            self.slot = backend._take(self.index)
            backend.matchers[self.index].add([self.slot], [self.prompt], in_fact=[self.in_fact])
            weakref.finalize(self, backend._released.append, (self.index, self.slot))
        return self.slot

    def accept_token(self, token: int) -> None:
        with self.backend.lock:
            slot = self._slot()
            self.backend.matchers[self.index].step(np.asarray([slot]), np.asarray([int(token)]))
            self.tokens.append(int(token))

    def rollback(self, k: int) -> None:
        if k <= 0:
            return
        with self.backend.lock:
            slot = self._slot()
            del self.tokens[len(self.tokens) - min(k, len(self.tokens)):]
            matcher = self.backend.matchers[self.index]
            matcher.add([slot], [self.prompt], in_fact=[self.in_fact])
            if self.tokens:
                for tok in self.tokens:
                    matcher.step(np.asarray([slot]), np.asarray([tok]))

    def is_terminated(self) -> bool:
        return False  # free text goes on after a fact; SGLang ends a request at its stop tokens

    def copy(self) -> "FactGrammar":
        return FactGrammar(self.backend, self.index, self.prompt, self.in_fact)

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device) -> torch.Tensor:
        return FactGrammarBackend.allocate_vocab_mask(vocab_size, batch_size, device)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device) -> torch.Tensor:
        return FactGrammarBackend.move_vocab_mask(vocab_mask, device)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        apply_bitmask(logits, vocab_mask)

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        FactGrammar.fill_vocab_mask_batched([GrammarRow(idx, self)], vocab_mask)

    @staticmethod
    def fill_vocab_mask_batched(entries: list, vocab_mask: torch.Tensor) -> None:
        """Every listed row at once: one matcher call per index, one scatter of bits."""
        by_index: dict[tuple[int, str], list] = {}
        for entry in entries:
            grammar = entry.grammar
            if isinstance(grammar, FactGrammar):
                by_index.setdefault((id(grammar.backend), grammar.index), []).append(entry)
            else:  # another backend's grammar in the same batch
                grammar.fill_vocab_mask(vocab_mask, entry.row)
        bits = vocab_mask.numpy().view(np.uint32) if vocab_mask.device.type == "cpu" else None
        for group in by_index.values():
            backend = group[0].grammar.backend
            with backend.lock:
                slots = np.asarray([e.grammar._slot() for e in group], dtype=np.int64)
                mask = backend.matchers[group[0].grammar.index].mask(slots, backend.vocab_size)
            if mask.empty:
                continue
            rows = np.asarray([e.row for e in group], dtype=np.int64)
            words = np.zeros((mask.rows.size, vocab_mask.shape[1]), dtype=np.uint32)
            order = np.searchsorted(mask.rows, mask.token_rows)
            np.bitwise_or.at(words, (order, mask.tokens >> 5), np.left_shift(1, mask.tokens & 31).astype(np.uint32))
            if bits is not None:
                bits[rows[mask.rows]] = words
            else:
                vocab_mask[torch.from_numpy(rows[mask.rows]).to(vocab_mask.device)] = \
                    torch.from_numpy(words.view(np.int32)).to(vocab_mask.device)


try:  # its kernel applies the bitmask where installed (SGLang's own dependency)
    from xgrammar import apply_token_bitmask_inplace as _xgrammar_apply
except ImportError:
    _xgrammar_apply = None


def apply_bitmask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
    """``logits[r, t] = -inf`` where bit ``t % 32`` of ``vocab_mask[r, t // 32]`` is 0 (ids past
    the mask's width are left alone); rows of all ones are not touched."""
    vocab_mask = vocab_mask.to(logits.device)
    if _xgrammar_apply is not None:
        _xgrammar_apply(logits, vocab_mask)
        return
    rows = (vocab_mask != -1).any(dim=1).nonzero().flatten()
    if rows.numel() == 0:
        return
    width = min(logits.shape[-1], vocab_mask.shape[-1] * 32)
    if logits.device.type == "cpu":  # bits unpacked by numpy: word t // 32 is little-endian
        bits = vocab_mask[rows].numpy().view(np.uint8)
        allowed = np.unpackbits(bits, axis=1, count=width, bitorder="little").view(bool)
        sub = logits[rows, :width]
        sub.masked_fill_(torch.from_numpy(~allowed), float("-inf"))
        logits[rows, :width] = sub
        return
    ids = torch.arange(width, device=logits.device)
    allowed = (vocab_mask[rows][:, ids >> 5] >> (ids & 31)) & 1
    sub = logits[rows, :width]
    sub.masked_fill_(allowed == 0, float("-inf"))
    logits[rows, :width] = sub
