"""The HTTP server: OpenAI-compatible completions constrained to stored facts, and exploration.

``POST /v1/chat/completions`` and ``/v1/completions`` take the OpenAI schema (streaming
with ``"stream": true``, server-sent events) plus ``"refactx": {"index": NAME}`` (the
``extra_body`` of the ``openai`` client) naming the index to constrain by -- the server's
default when absent, none with ``{"index": null}``. A chat request without a system
message gets the project's prompt (it explains ``Fact:``, or ``Path:`` when the index holds
reasoning paths; ``"refactx": {"prompt": "none"}`` keeps the messages as sent). The answer is the usual OpenAI response plus
``facts``: each fact the model wrote, its text, whether it is stored, whether it is
complete, and a stored fact's ``provenance`` (its fact id and sources; docs/provenance.md).

``GET /v1/models``, ``/health`` (live), ``/ready`` (model loaded, every index answers),
``/metrics`` (Prometheus text), and ``GET /v1/indexes/{name}/entities?q=``,
``/relations?entity=``, ``/objects?entity=&relation=``, ``/facts?prefix=&offset=&limit=``.

Bad input gets a status and the server keeps serving: malformed JSON 400, an unknown index
404 naming the served ones, ``max_tokens`` over the limit 422, a body over the limit 413,
more requests in flight than allowed 429, a request over its time limit 504.

A request reads one build of its index from its first token to the check of its facts (the
build served when it entered the engine; ``refactx.build_id`` in the answer): a build
activated meanwhile serves the next requests. When retention drops a build under a request
that reads it, the request fails with 503 ``build_retired`` (retry: it reads the active
build) and is never finished from another build.
"""


import asyncio
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, AsyncIterator

from .. import explore
from ..engines.core import index_prompt
from ..errors import BuildRetired
from ..prompt import Prompt
from .engine import Engine, Job, encode_chat

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSettings:
    model_name: str = "smollm2"
    default_index: str | None = None
    max_new_tokens: int = 256
    max_concurrent: int = 32
    max_body_bytes: int = 1 << 20
    request_timeout_s: float = 300.0


class _Metrics:
    def __init__(self) -> None:
        self.counters: dict[str, int] = {}

    def add(self, name: str, value: int = 1, **labels: str) -> None:
        key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
        self.counters[key] = self.counters.get(key, 0) + value

    def text(self, engine: Engine) -> str:
        lines = [f"refactx_{k} {v}" for k, v in sorted(self.counters.items())]
        lines.append(f"refactx_constraint_seconds_total {engine.constraint_seconds:.6f}")
        lines.append(f"refactx_batches_total {engine.batches}")
        for name, index in engine.indexes.items():
            stats = getattr(index, "stats", None)
            if stats is not None:
                lines.append(f'refactx_index_lookups_total{{index="{name}"}} {stats.lookups}')
                lines.append(f'refactx_index_round_trips_total{{index="{name}"}} {stats.round_trips}')
        return "\n".join(lines) + "\n"


class _Refused(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def create_app(engine: Engine, settings: ServerSettings = ServerSettings()):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

    app = FastAPI(title="refactx", description=__doc__)
    metrics = _Metrics()
    in_flight = {"n": 0}
    tokenizer = engine.tokenizer

    def error(status: int, message: str, kind: str) -> JSONResponse:
        metrics.add("errors_total", kind=kind)
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    def failure(job: Job) -> tuple[int, str, str]:
        if isinstance(job.error, BuildRetired):  # retention dropped the build it read
            return 503, f"{job.error}; retry the request", "build_retired"
        return 500, f"generation failed: {job.error}", "engine_error"

    def job_error(job: Job) -> JSONResponse:
        return error(*failure(job))

    @app.exception_handler(_Refused)
    async def refused(_request, exc: _Refused):
        return error(exc.status, exc.message, exc.kind)

    async def body_of(request: Request) -> dict[str, Any]:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > settings.max_body_bytes:
            raise _Refused(413, f"the body is over {settings.max_body_bytes} bytes", "request_too_large")
        raw = await request.body()
        if len(raw) > settings.max_body_bytes:
            raise _Refused(413, f"the body is over {settings.max_body_bytes} bytes", "request_too_large")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise _Refused(400, f"the body is not JSON: {exc}", "invalid_json") from exc
        if not isinstance(body, dict):
            raise _Refused(400, "the body must be a JSON object", "invalid_request")
        return body

    def index_of(body: dict[str, Any]) -> str | None:
        options = body.get("refactx") or {}
        if not isinstance(options, dict):
            raise _Refused(400, '"refactx" must be an object, e.g. {"index": "NAME"}', "invalid_request")
        index = options.get("index", settings.default_index)
        if index is not None and index not in engine.indexes:
            raise _Refused(404, f"unknown index {index!r}; served: {sorted(engine.indexes)}", "index_not_found")
        return index

    def job_for(body: dict[str, Any], prompt_ids: list[int], index: str | None) -> Job:
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or settings.max_new_tokens
        if not isinstance(max_tokens, int) or max_tokens < 1 or max_tokens > settings.max_new_tokens:
            raise _Refused(422, f"max_tokens must be 1..{settings.max_new_tokens}, not {max_tokens!r}",
                           "invalid_max_tokens")
        temperature = body.get("temperature") or 0.0
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise _Refused(422, "temperature must be a number >= 0", "invalid_request")
        return Job(prompt_ids=prompt_ids, index=index, max_new_tokens=max_tokens, temperature=float(temperature))

    def chat_prompt(body: dict[str, Any], index: str | None) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            raise _Refused(400, "messages must be a non-empty list of {role, content}", "invalid_request")
        options = body.get("refactx") or {}
        if options.get("prompt", "refactx") == "refactx" and not any(m.get("role") == "system" for m in messages):
            question = messages[-1]["content"]
            # the prompt that explains the index's trigger (Fact:, or Path: over a path index)
            prompt = index_prompt(engine.indexes[index]) if index is not None else Prompt()
            messages = prompt.messages(question)
        return encode_chat(tokenizer, messages)

    def completion_prompt(body: dict[str, Any]) -> list[int]:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise _Refused(400, "prompt must be a non-empty string", "invalid_request")
        return list(tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def facts_json(job: Job) -> list[dict[str, Any]]:
        return [{"text": f.text, "stored": f.stored, "complete": f.complete, "token_ids": list(f.token_ids),
                 "provenance": asdict(f.provenance) if f.provenance else None}
                for f in job.facts]

    def usage(job: Job) -> dict[str, int]:
        return {"prompt_tokens": len(job.prompt_ids), "completion_tokens": len(job.output_ids),
                "total_tokens": len(job.prompt_ids) + len(job.output_ids)}

    async def serve(request: Request, chat: bool):
        if in_flight["n"] >= settings.max_concurrent:
            return error(429, f"more than {settings.max_concurrent} requests in flight; retry later",
                         "too_many_requests")
        in_flight["n"] += 1
        try:
            body = await body_of(request)
            index = index_of(body)
            job = job_for(body, chat_prompt(body, index) if chat else completion_prompt(body), index)
        except BaseException:
            in_flight["n"] -= 1
            raise
        metrics.add("requests_total", endpoint="chat" if chat else "completions")
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        model = settings.model_name
        if body.get("stream"):
            return StreamingResponse(stream(job, rid, created, model, chat), media_type="text/event-stream")
        try:
            await asyncio.wait_for(engine.run(job), settings.request_timeout_s)
        except asyncio.TimeoutError:
            return error(504, f"no answer within {settings.request_timeout_s} s", "timeout")
        finally:
            in_flight["n"] -= 1
        if job.error is not None:
            return job_error(job)
        account(job)
        text = tokenizer.decode(job.output_ids, skip_special_tokens=True)
        choice: dict[str, Any] = {"index": 0, "finish_reason": job.finish_reason, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": model, "choices": [choice], "usage": usage(job), "facts": facts_json(job),
                "refactx": {"index": job.index, "build_id": job.build_id}}

    def account(job: Job) -> None:
        metrics.add("tokens_total", len(job.output_ids), kind="generated")
        metrics.add("tokens_total", len(job.prompt_ids), kind="prompt")
        metrics.add("facts_total", sum(f.stored for f in job.facts), stored="true")
        metrics.add("facts_total", sum(not f.stored for f in job.facts), stored="false")

    async def stream(job: Job, rid: str, created: int, model: str, chat: bool) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        job.on_token = lambda tok: loop.call_soon_threadsafe(queue.put_nowait, tok)
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None = None, **extra: Any) -> bytes:
            if chat:
                delta = {"role": "assistant", "content": text} if text is not None else {}
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            data = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice], **extra}
            return f"data: {json.dumps(data)}\n\n".encode()

        runner = asyncio.ensure_future(engine.run(job))
        runner.add_done_callback(lambda _f: queue.put_nowait(None))
        sent = ""
        try:
            while True:
                tok = await queue.get()
                if tok is None:
                    break
                text = tokenizer.decode(job.output_ids, skip_special_tokens=True)
                if text.endswith("\ufffd"):
                    continue  # a character cut in the middle: wait for its next token
                if len(text) > len(sent):
                    yield chunk(text[len(sent):])
                    sent = text
            await runner
            if job.error is not None:
                status, message, kind = failure(job)
                metrics.add("errors_total", kind=kind)
                yield f"data: {json.dumps({'error': {'message': message, 'type': kind, 'code': status}})}\n\n".encode()
                return
            account(job)
            text = tokenizer.decode(job.output_ids, skip_special_tokens=True)
            if len(text) > len(sent):
                yield chunk(text[len(sent):])
            yield chunk(None, job.finish_reason, usage=usage(job), facts=facts_json(job),
                        refactx={"index": job.index, "build_id": job.build_id})
            yield b"data: [DONE]\n\n"
        finally:
            if not runner.done():  # the client went away: stop its row
                job.cancelled = True
                metrics.add("cancelled_total")
            in_flight["n"] -= 1

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await serve(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await serve(request, chat=False)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": settings.model_name, "object": "model", "owned_by": "refactx",
                                            "indexes": sorted(engine.indexes)}]}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        broken = {}
        for name, index in engine.indexes.items():
            try:
                await asyncio.to_thread(index.next_tokens, [])
            except Exception as exc:  # noqa: BLE001 - reported, the server keeps serving
                broken[name] = str(exc)
        if broken:
            return JSONResponse({"status": "not ready", "indexes": broken}, status_code=503)
        return {"status": "ready", "model": settings.model_name, "indexes": sorted(engine.indexes)}

    @app.get("/metrics")
    async def metrics_text():
        return PlainTextResponse(metrics.text(engine), media_type="text/plain; version=0.0.4")

    def index_named(name: str):
        if name not in engine.indexes:
            raise _Refused(404, f"unknown index {name!r}; served: {sorted(engine.indexes)}", "index_not_found")
        return engine.indexes[name]

    def labels(found) -> list[dict[str, Any]]:
        return [{"label": x.label, "facts": x.facts} for x in found]

    @app.get("/v1/indexes")
    async def indexes():
        return {"data": [{"name": n, "facts": ix.info.facts, "build_id": ix.info.build_id}
                         for n, ix in sorted(engine.indexes.items())]}

    @app.get("/v1/indexes/{name}/entities")
    async def entities(name: str, q: str = "", limit: int = 20):
        found = await asyncio.to_thread(explore.entities, index_named(name), tokenizer, q, min(limit, 1000))
        return {"data": labels(found)}

    @app.get("/v1/indexes/{name}/relations")
    async def relations(name: str, entity: str, limit: int = 100):
        found = await asyncio.to_thread(explore.relations, index_named(name), tokenizer, entity, min(limit, 1000))
        return {"data": labels(found)}

    @app.get("/v1/indexes/{name}/objects")
    async def objects(name: str, entity: str, relation: str, limit: int = 100):
        found = await asyncio.to_thread(explore.objects, index_named(name), tokenizer, entity, relation,
                                        min(limit, 1000))
        return {"data": labels(found)}

    @app.get("/v1/indexes/{name}/facts")
    async def facts(name: str, prefix: str = "", offset: int = 0, limit: int = 50):
        if offset < 0 or not 0 <= limit <= 1000:
            raise _Refused(422, "offset >= 0 and 0 <= limit <= 1000", "invalid_request")
        page = await asyncio.to_thread(explore.facts_page, index_named(name), tokenizer, prefix,
                                       offset=offset, limit=limit)
        return {"data": page, "offset": offset}

    return app
