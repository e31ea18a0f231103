"""The server's vLLM engine: ``refactx serve --engine vllm``.

vLLM's ``AsyncLLM`` generates (continuous batching, its engine core in a child process)
with the refactx logits processor (:mod:`refactx_index.engines.vllm`) loaded in it; this
module only turns a server :class:`~refactx_index.server.engine.Job` into a vLLM request
and back. Requests that name an index carry ``extra_args={"refactx_index": NAME}``; the
others are left alone. The server process opens the same indexes itself to read the facts
each answer wrote (and for the exploration API).

Both processes take the end-of-sequence ids from the model directory's one
:class:`~refactx_index.vocab.Vocabulary` (the model config's and the generation config's):
each request asks vLLM to stop on exactly those ids, the worker's mask forces a dead end to
them, and the server's fact reader reads the row they end. The end id that stops a row is not
delivered as text, as in the transformers back end. Chat prompts are rendered with vLLM's own
tokenizer: the server process loads the model's ``tokenizer.json`` once, for the vocabulary.

Beams (``"refactx": {"beams": N}``, N > 1): the request runs constrained beam search
(:func:`refactx_index.engines.vllm_beams.constrained_beams`) over this engine -- each step,
one one-token request per beam (and per 128 ids a beam inside a fact may write), without the
processor's switch: the search itself holds each beam's fact state, on the build the request
read, and ends a beam on the vocabulary's end ids. The answer is the best beam's text and the
facts the server's reader finds in it, as for a greedy row. The search's own work runs in a
thread; its requests go through the engine beside every other request.

Builds: the processor in the engine core pins a request's build when the request enters
the batch; the server reads the facts on the build it served when the request arrived.
The two are the same build unless an activation falls between the two moments (a few
milliseconds): then a fact of the older build may be reported ``stored: false``. The
transformers engine, in one process, has no such gap.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time

from ..engines.core import FactConstraint
from ..engines.vllm_beams import candidates_per_step, constrained_beams, gather_scores, score_requests
from ..qa.ask import read_facts
from ..tree.index import TreeIndex
from ..vocab import Vocabulary
from .engine import Job

log = logging.getLogger(__name__)

PROCESSOR = "refactx_index.engines.vllm:RefactxLogitsProcessor"
# the widest beam search a request may ask for ("refactx": {"beams": N})
MAX_BEAMS = 6


class _Stopped(Exception):
    """A beam search stopped between two steps: its client went away or its time ran out."""


class VllmEngine:
    """Generation for the server by vLLM (module doc). ``index_specs``: name -> index file
    or PostgreSQL DSN, as the processor opens them; ``indexes``: the same, opened here."""

    def __init__(self, model_dir: str, index_specs: dict[str, str], indexes: dict[str, TreeIndex],
                 vocabulary: Vocabulary, *, max_batch: int = 16, max_model_len: int = 4096,
                 gpu_memory_utilization: float = 0.9, dtype: str = "auto", enforce_eager: bool = False) -> None:
        from vllm import AsyncEngineArgs  # vLLM is an optional dependency: imported where it is used
        from vllm.v1.engine.async_llm import AsyncLLM

        self.indexes = dict(indexes)
        self.vocabulary = vocabulary
        self.eos = frozenset(vocabulary.eos_ids)
        # the server's own reader of the facts each answer wrote, the worker's constraint on
        # the same vocabulary (never a mask here: vLLM's worker masks with its own processor)
        self.reader = FactConstraint.for_vocabulary(self.indexes, vocabulary)
        log.info("refactx: the server reads facts with end-of-sequence ids %s", sorted(self.eos))
        args = AsyncEngineArgs(model=model_dir, dtype=dtype, max_model_len=max_model_len,
                               gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_batch,
                               enforce_eager=enforce_eager, logits_processors=[PROCESSOR],
                               # an unconstrained beam asks for its best continuations' log-probabilities
                               max_logprobs=max(20, candidates_per_step(MAX_BEAMS, len(self.eos))),
                               additional_config={"refactx": {"indexes": dict(index_specs)}})
        self.llm = AsyncLLM.from_engine_args(args)
        self.tokenizer = self.llm.get_tokenizer()  # vLLM's own, for chat templates
        self.context_length = max_model_len
        self.constraint_seconds = 0.0  # spent in vLLM's worker process: not seen from here
        self.batches = 0
        self.max_beams = MAX_BEAMS  # "refactx": {"beams": N} up to this (app.py checks)

    async def run(self, job: Job) -> Job:
        from vllm import SamplingParams  # optional dependency (above)

        if job.beams > 1:
            return await self._run_beams(job)
        extra = {"refactx_index": job.index} if job.index is not None else None
        params = SamplingParams(temperature=job.temperature, top_p=job.top_p, max_tokens=job.max_new_tokens,
                                extra_args=extra, seed=job.seed if job.temperature > 0 else None,
                                stop_token_ids=sorted(self.eos))
        request_id = f"refactx-{job.id}-{os.getpid()}"
        build = self.indexes[job.index].serving_build() if job.index is not None else None
        written = 0
        try:
            async for out in self.llm.generate({"prompt_token_ids": list(job.prompt_ids)}, params, request_id):
                ids = out.outputs[0].token_ids
                if out.finished and ids and int(ids[-1]) in self.eos:
                    ids = ids[:-1]  # the end id that stopped the row: not text
                for tok in ids[written:]:
                    job.output_ids.append(int(tok))
                    if job.on_token is not None:
                        job.on_token(int(tok))
                written = len(ids)
                if job.cancelled:  # the client went away (a stream's consumer stopped)
                    await self.llm.abort(request_id)
                    job.finish_reason = "cancelled"
                    break
                if job.deadline is not None and time.monotonic() >= job.deadline:
                    await self.llm.abort(request_id)
                    job.finish_reason = "timeout"
                    break
                if out.finished:
                    job.finish_reason = out.outputs[0].finish_reason or "stop"
        except asyncio.CancelledError:  # a request over its time limit
            job.cancelled = True
            await self.llm.abort(request_id)
            raise
        except Exception as exc:  # noqa: BLE001 - the server maps it to a status
            log.exception("vLLM failed request %s", request_id)
            job.error = exc
        if job.index is not None and job.error is None:
            row = list(job.prompt_ids) + job.output_ids
            job.facts = read_facts(self.reader.matchers[job.index].matcher, self.vocabulary,
                                   self.indexes[job.index], row, len(job.prompt_ids), build=build)
            job.build_id = build.info.build_id if build is not None else None
        if job.on_done is not None:
            job.on_done(job)
        return job

    async def _run_beams(self, job: Job) -> Job:
        """``job`` by constrained beam search (module doc): its tokens the best beam's."""
        from vllm import SamplingParams  # optional dependency (above)

        loop = asyncio.get_running_loop()
        index = self.indexes[job.index]
        build = index.serving_build()
        steps = itertools.count()

        async def answers(prompts: list[dict], params: list, step: int) -> list:
            async def one(k: int) -> object:
                final = None
                async for out in self.llm.generate(prompts[k], params[k], f"refactx-{job.id}-beam{step}-{k}"):
                    final = out
                return final.outputs[0].logprobs[0]
            return await asyncio.gather(*(one(k) for k in range(len(prompts))))

        def score(requests: list, top: int) -> list[dict[int, float]]:  # runs in the search's thread
            if job.cancelled:
                raise _Stopped("cancelled")
            left = None if job.deadline is None else job.deadline - time.monotonic()
            if left is not None and left <= 0:
                raise _Stopped("timeout")
            prompts, params, owners = score_requests(requests, top, SamplingParams)
            step = asyncio.run_coroutine_threadsafe(answers(prompts, params, next(steps)), loop)
            try:
                return gather_scores(len(requests), owners, step.result(left))
            except TimeoutError:
                step.cancel()
                raise _Stopped("timeout") from None

        try:
            (hyps,) = await asyncio.to_thread(constrained_beams, score, self.vocabulary, [job.prompt_ids], index,
                                              beam_width=job.beams, max_tokens=job.max_new_tokens,
                                              length_penalty=1.0, build=build)
        except _Stopped as stop:
            job.finish_reason = str(stop)
        except Exception as exc:  # noqa: BLE001 - the server maps it to a status
            log.exception("vLLM failed the beams of request %s", job.id)
            job.error = exc
        else:
            tokens = list(hyps[0].tokens)
            job.finish_reason = "length"
            if tokens and tokens[-1] in self.eos:
                tokens.pop()  # the end id that ended the beam: not text
                job.finish_reason = "stop"
            for tok in tokens:
                job.output_ids.append(int(tok))
                if job.on_token is not None:
                    job.on_token(int(tok))
            row = list(job.prompt_ids) + job.output_ids
            job.facts = read_facts(self.reader.matchers[job.index].matcher, self.vocabulary, index, row,
                                   len(job.prompt_ids), build=build)
            job.build_id = build.info.build_id
        if job.on_done is not None:
            job.on_done(job)
        return job

    def close(self) -> None:
        self.llm.shutdown()

