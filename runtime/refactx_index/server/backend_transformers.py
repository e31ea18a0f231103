"""The fact server's transformers back end: in process, concurrent requests batched.

Requests wait in a queue; one worker thread takes up to ``max_batch`` of them at a time
and runs them as one left-padded ``generate`` call, each row constrained by the index its
request named (one :class:`~refactx_index.engines.core.FactConstraint` over every served
index) or not at all. Each new token is handed to its request as it is written (streaming),
and a row stops at its own end of sequence, its own token limit, its deadline, or when its
client went away. Requests that arrive while a batch runs wait for the next one (no
continuous batching: transformers' ``generate`` takes its rows at the start).

A long prompt (over ``long_prompt_tokens``) would pad every row of its batch to its width and
hold the batch through its prefill: it runs alone instead, one at a time, on a second worker
thread with its own fact constraint, so short requests keep their batches beside it (the two
share the machine's cores, a bounded share: one long prompt at a time).

Decoding is per row: ``generate`` runs greedy, and a row whose request asked for a
temperature draws its token itself (its own seeded generator, its own ``top_p``) after the
fact mask and leaves only that token, so a batch never changes one request's decoding.
A token is delivered by the stopping criterion, which sees every token ``generate`` appends
(the last one too): a request gets exactly the tokens counted, and its facts are read from
exactly those.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any

import numpy as np

from ..engines.core import FactConstraint, index_trigger
from ..qa.ask import GroundedAnswer, read_facts
from ..qa.models import LoadedModel
from ..tree.index import TreeIndex
from .engine import Job

log = logging.getLogger(__name__)


class _Rows:
    """A transformers logits processor and stopping criterion for one batch of jobs.

    The stopping criterion runs after each token ``generate`` appends: it delivers that token
    (or sees the row's end), steps the fact constraint, and stops the row at its token limit,
    deadline or cancellation. The logits processor masks the next step's logits and draws the
    token of each sampled row (module doc)."""

    def __init__(self, engine: "TransformersEngine", jobs: list[Job], width: int, constraint: FactConstraint) -> None:
        import torch

        self.engine, self.jobs, self.width, self.constraint = engine, jobs, width, constraint
        self.seconds = 0.0  # this batch's constraint time (the engine's total counts every batch)
        self.rows = np.arange(len(jobs))
        self.done = np.zeros(len(jobs), dtype=bool)
        self.generators: dict[int, "torch.Generator"] = {}
        for r, job in enumerate(jobs):
            if job.temperature > 0:
                gen = torch.Generator()
                if job.seed is not None:
                    gen.manual_seed(job.seed)
                else:
                    gen.seed()  # its own random seed; torch's global generator is left alone
                self.generators[r] = gen
        self.grounded: dict[int, Any] = {}
        for r, job in enumerate(jobs):
            if job.grounded and job.index is not None:
                trigger = index_trigger(engine.indexes[job.index])
                self.grounded[r] = GroundedAnswer(engine.tokenizer, width, trigger, sorted(engine.eos),
                                                  stored=lambda text: True)
        # a plain-text prompt (a model without a chat template): each row ends after its reply;
        # imported here, as torch is in this module: importing the server stays free of torch
        from ..engines.transformers import EndOfPlainReply

        self.plain = (None if getattr(engine.tokenizer, "chat_template", None)
                      else EndOfPlainReply(engine.tokenizer, width, sorted(engine.eos)))

    def __call__(self, input_ids, scores):  # the logits processor
        started = time.perf_counter()
        self.constraint.apply(scores, self.rows)
        for r, grounded in self.grounded.items():
            if not self.done[r]:
                grounded.mask_row(input_ids[r, self.width:].tolist(), scores[r])
        if self.plain is not None:
            for r in np.flatnonzero(~self.done):
                self.plain.mask_row(input_ids[r, self.width:].tolist(), scores[r])
        self._spent(time.perf_counter() - started)
        for r, gen in self.generators.items():
            if not self.done[r]:
                self._sample(scores, r, gen)
        return scores

    def _spent(self, seconds: float) -> None:
        self.seconds += seconds
        self.engine.constraint_seconds += seconds

    def _sample(self, scores, r: int, gen) -> None:
        """Draw row ``r``'s token at its own temperature and top-p; leave it the only choice
        (the greedy step of ``generate`` then takes it)."""
        import torch

        job = self.jobs[r]
        logits = scores[r].float() / job.temperature
        probs = torch.softmax(logits, dim=-1)
        if job.top_p < 1.0:
            ordered, order = torch.sort(probs, descending=True)
            before = torch.cumsum(ordered, dim=-1) - ordered
            ordered[before >= job.top_p] = 0.0  # the smallest set whose mass reaches top_p
            probs = torch.zeros_like(probs).scatter_(0, order, ordered)
        if not torch.isfinite(probs).all() or float(probs.sum()) <= 0:
            return  # every choice masked (or overflow): leave the row's greedy choice
        tok = int(torch.multinomial(probs, 1, generator=gen))
        scores[r].fill_(-math.inf)
        scores[r, tok] = 0.0

    def stop(self, input_ids, scores, **kwargs):  # the stopping criterion, per row
        import torch

        if input_ids.shape[1] > self.width:
            new = input_ids[:, -1].detach().cpu().numpy().astype(np.int64)
            live = np.flatnonzero(~self.done)
            self._deliver(new)
            started = time.perf_counter()
            self.constraint.step(live, new[live])
            self._spent(time.perf_counter() - started)
        now = time.monotonic()
        for r, job in enumerate(self.jobs):
            if self.done[r]:
                continue
            if job.cancelled or self.engine.stopping:
                job.finish_reason = "cancelled"
                self.done[r] = True
            elif job.deadline is not None and now >= job.deadline:
                job.finish_reason = "timeout"
                self.done[r] = True
        return torch.from_numpy(self.done.copy())

    def _deliver(self, new: np.ndarray) -> None:
        eos = self.engine.eos
        for r, job in enumerate(self.jobs):
            if self.done[r]:
                continue
            tok = int(new[r])
            if tok in eos:
                job.finish_reason = "stop"
                self.done[r] = True
                continue
            job.output_ids.append(tok)
            if job.on_token is not None:
                job.on_token(tok)
            if len(job.output_ids) >= job.max_new_tokens:
                job.finish_reason = "length"
                self.done[r] = True


class TransformersEngine:
    """Generation for the server (module doc). ``indexes``: name -> index."""

    grounded_answers = True  # honours Job.grounded

    def __init__(self, loaded: LoadedModel, indexes: dict[str, TreeIndex], *, max_batch: int = 16,
                 long_prompt_tokens: int | None = 1024) -> None:
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.vocabulary = loaded.vocabulary
        self.indexes = dict(indexes)
        self.max_batch = max_batch
        # the longest prompt + answer the model takes (the server's prompt limit derives from it)
        self.context_length: int | None = getattr(loaded.model.config, "max_position_embeddings", None)
        self.eos = frozenset(self.vocabulary.eos_ids)
        self.long_prompt_tokens = long_prompt_tokens
        self.constraint = FactConstraint.for_vocabulary(self.indexes, self.vocabulary)
        self.constraint_seconds = 0.0
        self.batches = 0
        self._pending: list[Job] = []
        self._long: list[Job] = []  # long prompts, each generated alone (module doc)
        self._cond = threading.Condition()
        self._stopping = False
        self._threads = [threading.Thread(target=self._loop, args=(self._pending, max_batch, self.constraint),
                                          name="refactx-engine", daemon=True)]
        if long_prompt_tokens is not None:
            self._threads.append(threading.Thread(
                target=self._loop, args=(self._long, 1, FactConstraint.for_vocabulary(self.indexes, self.vocabulary)),
                name="refactx-engine-long", daemon=True))
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------ requests
    def submit(self, job: Job) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("the engine is shutting down")
            long = self.long_prompt_tokens is not None and len(job.prompt_ids) > self.long_prompt_tokens
            (self._long if long else self._pending).append(job)
            self._cond.notify_all()

    async def run(self, job: Job) -> Job:
        """Submit ``job`` and wait for it without blocking the event loop."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        previous = job.on_done

        def finished(j: Job) -> None:
            if previous is not None:
                previous(j)
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(j))

        job.on_done = finished
        self.submit(job)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            job.cancelled = True
            raise

    @property
    def stopping(self) -> bool:
        return self._stopping

    def close(self) -> None:
        """Stop (:meth:`begin_shutdown`) and wait for the worker thread."""
        self.begin_shutdown()
        for thread in self._threads:
            thread.join(timeout=10)

    def begin_shutdown(self) -> None:
        """Refuse new requests; the batch running ends at its next step and the waiting
        requests are cancelled (a shutdown never waits for whole answers). Safe to call
        from a signal handler's thread: it takes no lock the worker holds for long."""
        with self._cond:
            self._stopping = True
            waiting = self._pending + self._long
            self._pending.clear()
            self._long.clear()
            self._cond.notify_all()
        for job in waiting:
            job.cancelled = True
            job.finish_reason = "cancelled"
            if job.on_done is not None:
                job.on_done(job)

    # ------------------------------------------------------------------ the worker
    def _loop(self, pending: list[Job], max_batch: int, constraint: FactConstraint) -> None:
        """One worker: batches of up to ``max_batch`` jobs from ``pending``, constrained by
        ``constraint`` (each worker has its own: its rows are its slots)."""
        while True:
            with self._cond:
                while not pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                jobs = pending[:max_batch]
                del pending[:max_batch]
            for job in jobs:
                if job.cancelled and job.on_done is not None:  # its client left while it waited
                    job.finish_reason = "cancelled"
                    job.on_done(job)
            jobs = [j for j in jobs if not j.cancelled]
            if not jobs:
                continue
            try:
                self._generate(jobs, constraint)
            except BaseException as exc:  # noqa: BLE001 - every job must hear of it
                log.exception("generation failed for %d requests", len(jobs))
                for job in jobs:
                    job.error = exc
            finally:
                constraint.remove(range(len(jobs)))
                for job in jobs:
                    if job.on_done is not None:
                        job.on_done(job)

    def _generate(self, jobs: list[Job], constraint: FactConstraint) -> None:
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        self.batches += 1
        width = max(len(j.prompt_ids) for j in jobs)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = min(self.eos)
        ids = torch.full((len(jobs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(jobs), width), dtype=torch.long)
        for r, job in enumerate(jobs):
            n = len(job.prompt_ids)
            ids[r, width - n:] = torch.tensor(job.prompt_ids)
            mask[r, width - n:] = 1
            if job.index is not None:
                constraint.add(r, job.index, job.prompt_ids)
        rows = _Rows(self, jobs, width, constraint)
        # greedy for the whole batch: a sampled row draws its own token (_Rows._sample)
        kwargs: dict[str, Any] = dict(do_sample=False, num_beams=1, pad_token_id=pad,
                                      eos_token_id=sorted(self.eos),
                                      max_new_tokens=max(j.max_new_tokens for j in jobs))
        with torch.inference_mode():
            self.loaded.model.generate(input_ids=ids, attention_mask=mask,
                                       logits_processor=LogitsProcessorList([rows]),
                                       stopping_criteria=StoppingCriteriaList([rows.stop]), **kwargs)
        for slot, job in enumerate(jobs):
            job.constraint_seconds = rows.seconds
            if job.index is not None:
                self._read_facts(slot, job, constraint)

    def _read_facts(self, slot: int, job: Job, constraint: FactConstraint) -> None:
        index = self.indexes[job.index]  # type: ignore[index]
        row = list(job.prompt_ids) + list(job.output_ids)
        # the facts are read and checked on the build the generation read (pinned when the
        # request entered), whatever was activated since
        build = constraint.build_of(slot)
        matcher = constraint.matchers[job.index].matcher  # type: ignore[index]
        job.facts = read_facts(matcher, self.vocabulary, index, row, len(job.prompt_ids), build=build)
        job.build_id = (build.info if build is not None else index.info).build_id
