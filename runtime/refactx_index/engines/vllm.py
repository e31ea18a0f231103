"""The fact constraint inside vLLM: logits processors for both of its model runners.

Load by qualified name, and say which indexes the engine serves in its
``additional_config`` (or the environment variable ``REFACTX_VLLM_CONFIG``, the same
JSON, which the API server's process also reads to refuse unknown index names early)::

    LLM(model=..., logits_processors=["refactx_index.engines.vllm:RefactxLogitsProcessor"],
        additional_config={"refactx": {"indexes": {"sample": "/data/sample.rfx"}}})

    vllm serve MODEL --logits-processors refactx_index.engines.vllm:RefactxLogitsProcessor \\
        --additional-config '{"refactx": {"indexes": {"wikidata-qwen2.5": "postgresql://..."}}}'

``indexes`` maps a name to an index file (``.rfx``) or a PostgreSQL DSN (the active build
of that name, followed across activations); ``trigger`` is what opens a fact, for every
index (default: each index's kind says, ``"Fact:"``, or ``"Path:"`` over a path index). Each
worker process opens the indexes once and checks each against the model's
:class:`~refactx_index.vocab.Vocabulary` at start-up
(:class:`~refactx_index.errors.VocabularyMismatch`); the mask's end-of-sequence ids are that
vocabulary's (the model config's and the generation config's), the ones the fact server reads
rows with.

A request switches the constraint on with ``SamplingParams(extra_args={"refactx_index":
NAME})`` -- over HTTP, ``"vllm_xargs": {"refactx_index": NAME}`` -- and may add
``"refactx_in_fact": 1`` when its prompt ends inside a fact (the ids after the prompt's
last trigger are the fact's first tokens). Every other request is left alone: its logits
are not touched. A name the engine does not serve is refused at admission where the
server knows the names (the environment variable), else the request may only end.

* ``RefactxLogitsProcessor`` -- the V1 model runner (``update_state(BatchUpdate)`` with
  added, removed and moved rows, then ``apply(logits)``); what vLLM runs on CPUs.
* ``RefactxLogitsProcessorV2`` -- Model Runner V2 (``add_request``, ``apply(logits,
  ctx)``), which vLLM uses on GPUs with Triton. It reads the prompt of a new request and
  the batch's last tokens from the runner's buffers: one small device-to-host copy per step.

Neither is argmax-invariant (the constraint changes greedy choices). vLLM rejects custom
logits processors with speculative decoding, and its beam search runs outside the engine
without ``extra_args``: see docs/runtime.md for what to use instead.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError, InputRefused
from ..tree.index import check_vocabulary
from ..vocab import as_vocabulary, open_model_vocabulary
from .core import FactConstraint, open_indexes

from vllm.v1.sample.logits_processor import (BatchUpdate, LogitsProcessor, MoveDirectionality,
                                             process_dict_updates)

try:  # Model Runner V2 (vLLM >= 0.2x); absent from older releases
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as _V2Base
except ImportError:  # pragma: no cover - depends on the vLLM release
    _V2Base = object  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    import torch
    from vllm import SamplingParams
    from vllm.config import VllmConfig

log = logging.getLogger(__name__)

__all__ = ["INDEX_ARG", "IN_FACT_ARG", "RefactxLogitsProcessor", "RefactxLogitsProcessorV2"]

INDEX_ARG = "refactx_index"
IN_FACT_ARG = "refactx_in_fact"
CONFIG_ENV = "REFACTX_VLLM_CONFIG"
# the output id the V1 runner writes for a token not yet on the host (async scheduling)
PLACEHOLDER = -1


def _settings(vllm_config: "VllmConfig | None") -> dict[str, Any]:
    extra = getattr(vllm_config, "additional_config", None) if vllm_config is not None else None
    conf = extra.get("refactx") if isinstance(extra, dict) else None
    if conf is None and os.environ.get(CONFIG_ENV):
        try:
            conf = json.loads(os.environ[CONFIG_ENV]).get("refactx")
        except (ValueError, AttributeError) as exc:
            raise ConfigError(f"{CONFIG_ENV} is not JSON of the form "
                              '{"refactx": {"indexes": {...}}}: ' f"{exc}") from exc
    if not isinstance(conf, dict) or not isinstance(conf.get("indexes"), dict) or not conf["indexes"]:
        raise ConfigError('the refactx logits processor needs additional_config={"refactx": '
                          '{"indexes": {"NAME": "file.rfx or postgresql://..."}}} '
                          f"(or the same JSON in {CONFIG_ENV})")
    return conf


def requested(params: "SamplingParams") -> tuple[str | None, bool]:
    """The index a request asked for (``None``: unconstrained) and whether its prompt
    ends inside a fact."""
    extra = params.extra_args or {}
    name = extra.get(INDEX_ARG)
    if name is None:
        return None, False
    return str(name), bool(extra.get(IN_FACT_ARG, False))


def _validate(params: "SamplingParams") -> None:
    """Refuse a request's bad refactx arguments with :class:`InputRefused`, a ``ValueError``:
    what vLLM turns into a 400 answer."""
    extra = params.extra_args or {}
    if INDEX_ARG not in extra:
        return
    name = extra[INDEX_ARG]
    if not isinstance(name, str) or not name:
        raise InputRefused(f"{INDEX_ARG} must name an index, not {name!r}")
    if not isinstance(extra.get(IN_FACT_ARG, False), (bool, int)):
        raise InputRefused(f"{IN_FACT_ARG} must be true or false")
    if params.n > 1 and params.temperature == 0:
        raise InputRefused("the fact constraint follows each sequence: use n=1 for greedy requests")
    if os.environ.get(CONFIG_ENV):  # the server knows the names: refuse an unknown one now
        served = _settings(None)["indexes"]
        if name not in served:
            raise InputRefused(f"unknown index {name!r}; this server constrains by {sorted(served)}")


def _constraint(vllm_config: "VllmConfig", device: "torch.device | str", pin_memory: bool) -> FactConstraint:
    """Open the configured indexes, check them against the model's vocabulary, and
    build the engine-neutral constraint (once per worker process)."""
    conf = _settings(vllm_config)
    model_config = vllm_config.model_config
    model_dir = Path(model_config.model)
    tokenizer_dir = Path(getattr(model_config, "tokenizer", None) or model_dir)
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise ConfigError(f"the refactx constraint needs the model's tokenizer.json ({tokenizer_dir} has none)")
    if tokenizer_dir.resolve() == model_dir.resolve():
        vocabulary = open_model_vocabulary(model_dir)
    else:
        vocabulary = as_vocabulary(str(tokenizer_dir)).with_model(model_dir)
    indexes = open_indexes(conf["indexes"])
    for index in indexes.values():
        check_vocabulary(index, vocabulary)
    # a trigger in the config holds for every index; else each index's kind says (Fact: / Path:)
    constraint = FactConstraint.for_vocabulary(indexes, vocabulary, trigger=conf.get("trigger"),
                                               device=device, pin_memory=pin_memory)
    log.info("refactx: constraining by %s; end-of-sequence ids %s",
             ", ".join(f"{n} ({ix.info.facts} facts)" for n, ix in indexes.items()), list(constraint.eos))
    return constraint


@dataclass
class _Row:
    """A constrained request of the V1 runner's batch: what re-reading it needs, vLLM's live
    list of its output ids, and how many of them the matcher has read."""

    index: str
    in_fact: bool
    prompt: list[int]
    outputs: list[int]
    seen: int


def _known(outputs: list[int]) -> int:
    """How many output ids lead ``outputs`` before a placeholder: under async scheduling the
    runner appends ``-1`` for a token sampled but not yet copied to the host, and writes it
    in place before the logits processors run."""
    if not outputs or outputs[-1] != PLACEHOLDER:
        return len(outputs)
    return outputs.index(PLACEHOLDER)


class RefactxLogitsProcessor(LogitsProcessor):
    """The V1 model runner's logits processor (module doc). Slot = persistent batch index.

    ``update_state`` follows the batch's changes (removed, added, moved: the constraint's
    rows, and each request's row kept by vLLM's own ``process_dict_updates``); ``apply``
    first gives the matcher every output id written since the last step, then masks. A
    request preempted and resumed comes back as an added request with the ids it had
    written, which the matcher reads again from its prompt on; output ids the runner takes
    back (the list shrinks) are read again the same way."""

    def __init__(self, vllm_config: "VllmConfig", device: "torch.device", is_pin_memory: bool) -> None:
        self.constraint = _constraint(vllm_config, device, is_pin_memory)
        self._rows: dict[int, _Row] = {}  # slot -> its constrained request

    @classmethod
    def validate_params(cls, sampling_params: "SamplingParams") -> None:
        _validate(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        # the constraint's rows, in vLLM's order: removed, added, moved
        self.constraint.remove(list(batch_update.removed))
        refused = False
        for slot, params, prompt, outputs in batch_update.added:
            self.constraint.remove([slot])
            name, in_fact = requested(params)
            if name is not None:
                refused |= not self._admit(slot, name, in_fact, prompt or [], outputs[:_known(outputs)])
        for src, dst, direction in batch_update.moved:
            self.constraint.move(src, dst, swap=direction == MoveDirectionality.SWAP)
        # each request's row by vLLM's own helper (the same removed, added and moved)
        process_dict_updates(self._rows, batch_update, self._row)
        if refused:  # a slot refused at admission may only end: no row to follow
            for slot in [s for s in self._rows if s not in self.constraint.slots]:
                del self._rows[slot]

    def _row(self, params: "SamplingParams", prompt: list[int] | None, outputs: list[int]) -> _Row | None:
        name, in_fact = requested(params)
        if name is None or name not in self.constraint.matchers:
            return None
        return _Row(name, in_fact, list(prompt or []), outputs, _known(outputs))

    def _admit(self, slot: int, name: str, in_fact: bool, prompt: list[int], written: list[int]) -> bool:
        """``slot``'s request into the constraint, its ids ``written`` so far read; False
        where it may only end (refused)."""
        if name not in self.constraint.matchers:
            log.error("request asked for index %r, which this engine does not serve (%s): it "
                      "may only end", name, self.constraint.index_names())
            self.constraint.refuse(slot)
            return False
        try:
            self.constraint.add(slot, name, prompt, in_fact=in_fact, output_ids=written)
        except ValueError as exc:  # a prompt said to end inside a fact that is not stored
            log.error("request in slot %d: %s; it may only end", slot, exc)
            self.constraint.refuse(slot)
            return False
        return True

    def _catch_up(self) -> None:
        """Give the matcher the output ids written since the last step."""
        rows = self._rows
        slots = np.fromiter(rows, dtype=np.int64, count=len(rows))
        held = list(rows.values())
        lengths = np.fromiter((len(r.outputs) for r in held), dtype=np.int64, count=len(held))
        seen = np.fromiter((r.seen for r in held), dtype=np.int64, count=len(held))
        fresh = np.flatnonzero(lengths != seen)
        if fresh.size == 0:
            return
        if ((lengths[fresh] - seen[fresh]) == 1).all():  # the common step: one new id per row
            tokens = np.fromiter((held[i].outputs[-1] for i in fresh.tolist()), dtype=np.int64, count=fresh.size)
            if tokens.min() >= 0:
                self.constraint.step(slots[fresh], tokens)
                for i in fresh.tolist():
                    held[i].seen += 1
                return
        for i in fresh.tolist():  # several ids at once, placeholders, or ids taken back
            row, slot = held[i], int(slots[i])
            known = _known(row.outputs)
            if known < row.seen:  # the runner took ids back: read the row again from its prompt
                self.constraint.remove([slot])
                if not self._admit(slot, row.index, row.in_fact, row.prompt, row.outputs[:known]):
                    del rows[slot]
                    continue
            else:
                for tok in row.outputs[row.seen:known]:
                    self.constraint.step(slots[i:i + 1], np.asarray([tok], dtype=np.int64))
            row.seen = known

    def apply(self, logits: "torch.Tensor") -> "torch.Tensor":
        if self._rows:
            self._catch_up()
        if not self.constraint.busy():
            return logits
        return self.constraint.apply(logits, np.arange(logits.shape[0]))


class RefactxLogitsProcessorV2(_V2Base):  # type: ignore[misc,valid-type]
    """Model Runner V2's logits processor (module doc). Slot = the runner's request slot."""

    def __init__(self, vllm_config: "VllmConfig", req_states: Any) -> None:
        self.req_states = req_states
        device = req_states.device
        self.constraint = _constraint(vllm_config, device, getattr(device, "type", "cpu") != "cpu")
        self._pending: dict[int, tuple[str, bool]] = {}  # slots added, prompt not read yet
        self._known = np.zeros(req_states.max_num_reqs, dtype=np.int64)  # ids given per slot

    @classmethod
    def validate_params(cls, sampling_params: "SamplingParams") -> None:
        _validate(sampling_params)

    def add_request(self, req_idx: int, sampling_params: "SamplingParams") -> bool:
        self.constraint.remove([req_idx])
        self._pending.pop(req_idx, None)
        name, in_fact = requested(sampling_params)
        if name is None:
            return False
        if name not in self.constraint.matchers:
            log.error("request asked for index %r, which this engine does not serve: it may only end", name)
            self.constraint.refuse(req_idx)
            return True
        self._pending[req_idx] = (name, in_fact)
        return True

    def apply(self, logits: "torch.Tensor", ctx: Any) -> "torch.Tensor":
        row_slots = np.asarray(ctx.idx_mapping_np, dtype=np.int64)
        if self._pending:
            self._start(row_slots)
        if not self.constraint.busy():
            return logits
        # the token each row was fed is the one its request wrote last step: one copy
        fed = ctx.input_ids.to("cpu", non_blocking=False).numpy().astype(np.int64, copy=False)
        pos = ctx.pos.to("cpu", non_blocking=False).numpy().astype(np.int64, copy=False)
        new = (pos >= self._known[row_slots]) & np.isin(row_slots, self.constraint.constrained_slots())
        if new.any():
            self.constraint.step(row_slots[new], fed[new])
            self._known[row_slots[new]] = pos[new] + 1
        return self.constraint.apply(logits, row_slots)

    def _start(self, row_slots: np.ndarray) -> None:
        """Requests added since the last step: read their prompts from the runner. A request
        resumed after preemption comes back as a new one whose prefill is its prompt and the
        ids it had written: the matcher reads those too."""
        prompt_len = self.req_states.prompt_len.np
        prefill_len = self.req_states.prefill_len.np
        for slot in [s for s in row_slots.tolist() if s in self._pending]:
            name, in_fact = self._pending.pop(slot)
            n, filled = int(prompt_len[slot]), int(prefill_len[slot])
            ids = self.req_states.all_token_ids.gpu[slot, :filled].to("cpu").tolist()
            try:
                self.constraint.add(slot, name, ids[:n], in_fact=in_fact, output_ids=ids[n:])
            except ValueError as exc:
                log.error("request in slot %d: %s; it may only end", slot, exc)
                self.constraint.refuse(slot)
            self._known[slot] = filled
