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

Builds: the processor in the engine core pins a request's build when the request enters
the batch; the server reads the facts on the build it served when the request arrived.
The two are the same build unless an activation falls between the two moments (a few
milliseconds): then a fact of the older build may be reported ``stored: false``. The
transformers engine, in one process, has no such gap.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from ..engines.core import FactConstraint
from ..qa.ask import read_facts
from ..tree.index import TreeIndex
from ..vocab import Vocabulary
from .engine import Job

log = logging.getLogger(__name__)

PROCESSOR = "refactx_index.engines.vllm:RefactxLogitsProcessor"


class VllmEngine:
    """Generation for the server by vLLM (module doc). ``index_specs``: name -> index file
    or PostgreSQL DSN, as the processor opens them; ``indexes``: the same, opened here."""

    def __init__(self, model_dir: str, index_specs: dict[str, str], indexes: dict[str, TreeIndex],
                 vocabulary: Vocabulary, *, max_batch: int = 16, max_model_len: int = 4096,
                 gpu_memory_utilization: float = 0.9, dtype: str = "auto", enforce_eager: bool = False) -> None:
        from vllm import AsyncEngineArgs
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
                               additional_config={"refactx": {"indexes": dict(index_specs)}})
        self.llm = AsyncLLM.from_engine_args(args)
        self.tokenizer = self.llm.get_tokenizer()  # vLLM's own, for chat templates
        self.context_length = max_model_len
        self.constraint_seconds = 0.0  # spent in vLLM's worker process: not seen from here
        self.batches = 0

    async def run(self, job: Job) -> Job:
        from vllm import SamplingParams

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

    def close(self) -> None:
        self.llm.shutdown()

