"""The HTTP server: OpenAI-compatible completions constrained to stored facts, and exploration.

``POST /v1/chat/completions`` and ``/v1/completions`` take the OpenAI schema (streaming
with ``"stream": true``, server-sent events) plus ``"refactx": {"index": NAME}`` (the
``extra_body`` of the ``openai`` client) naming the index to constrain by -- the server's
default when absent, none with ``{"index": null}``. A chat request without a system
message gets the project's prompt (it explains ``Fact:``, or ``Path:`` when the index holds
reasoning paths; ``"refactx": {"prompt": "none"}`` keeps the messages as sent). The answer is the usual OpenAI response plus
``facts``: each fact the model wrote, its text, whether it is stored, whether it is
complete, and a stored fact's ``provenance`` (its fact id and sources; docs/provenance.md).

``GET /v1/models``, ``/health`` (live), ``/ready`` (model loaded, every index answers, the
database of each PostgreSQL index reachable), ``/metrics`` (Prometheus text), and
``GET /v1/indexes/{name}/entities?q=``, ``/relations?entity=``, ``/objects?entity=&relation=``,
``/facts?prefix=&offset=&limit=``.

Every refusal is a 4xx with one body shape, ``{"error": {"message", "type", "code"}}``, and
the server keeps serving; docs/server-api.md lists the statuses, the limits, and which
request fields are supported, refused or ignored.

A request reads one build of its index from its first token to the check of its facts (the
build served when it entered the engine; ``refactx.build_id`` in the answer): a build
activated meanwhile serves the next requests. When retention drops a build under a request
that reads it, the request fails with 503 ``build_retired`` (retry: it reads the active
build) and is never finished from another build.
"""


import asyncio
import hmac
import json
import logging
import math
import sys
import time
from urllib.parse import parse_qsl
import uuid
from dataclasses import asdict, dataclass
from typing import Any, AsyncIterator

from ..engines.core import index_prompt
from ..errors import BuildRetired, DatabaseUnavailable, QueryTimeout, RefactxError
from ..prompting.prompt import Prompt
from ..tree import explore
from .engine import Engine, Job, encode_chat
from .page import mount_page
from .pools import PoolFull, WorkPool

log = logging.getLogger(__name__)

# the loopback names a server bound to 127.0.0.1 answers to (any other Host header is refused:
# a web page the operator opens cannot reach it through DNS rebinding)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# the request fields each endpoint reads (docs/server-api.md has the table)
_COMMON_FIELDS = {"model", "max_tokens", "temperature", "top_p", "seed", "stream", "n", "refactx"}
_CHAT_FIELDS = _COMMON_FIELDS | {"messages", "max_completion_tokens"}
_COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt"}
# accepted and ignored: they change nothing this server does
_IGNORED_FIELDS = {"user", "metadata", "store", "stream_options", "parallel_tool_calls", "service_tier"}
# refused unless absent, null or their neutral value: the server cannot honour them
_REFUSED_FIELDS: dict[str, tuple[Any, ...]] = {
    "stop": ([],), "logprobs": (False, 0), "top_logprobs": (0,), "best_of": (1,), "echo": (False,),
    "suffix": ("",), "presence_penalty": (0,), "frequency_penalty": (0,), "logit_bias": ({},),
    "tools": ([],), "tool_choice": ("none",), "functions": ([],), "function_call": ("none",),
    "response_format": ({"type": "text"},), "prediction": (), "audio": (), "modalities": (["text"],),
    "reasoning_effort": (), "web_search_options": (),
}
_ROLES = ("system", "user", "assistant")
# how long a client told to retry after a 503 waits
RETRY_AFTER_S = 5
# ... after a 503 because a pool of work is full (server/pools.py)
BUSY_RETRY_AFTER_S = 1
# how long a database check answers for every request that asks meanwhile
_PING_TTL_S = 1.0


@dataclass(frozen=True)
class ServerSettings:
    model_name: str = "smollm2"
    default_index: str | None = None
    max_new_tokens: int = 256
    # the longest prompt in tokens; None: the model's context less max_new_tokens
    max_prompt_tokens: int | None = None
    max_concurrent: int = 32
    max_body_bytes: int = 1 << 20
    request_timeout_s: float = 300.0
    # requests to /v1/* and /metrics need "Authorization: Bearer <api_key>" when set
    api_key: str | None = None
    # the Host header names served ("*": any)
    allowed_hosts: tuple[str, ...] = ("*",)
    max_explore_offset: int = 10_000
    max_explore_limit: int = 1000
    explore_timeout_s: float = 10.0
    db_check_timeout_s: float = 2.0
    # threads for each kind of blocking work, and the calls each admits beyond them before it
    # refuses with 503 (server/pools.py): a flood of one kind never delays the others
    encode_workers: int = 2
    encode_max_waiting: int = 30
    explore_workers: int = 2
    explore_max_waiting: int = 6
    ping_workers: int = 2
    ping_max_waiting: int = 30


class _Metrics:
    def __init__(self) -> None:
        self.counters: dict[str, int] = {}

    def add(self, name: str, value: int = 1, **labels: str) -> None:
        key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
        self.counters[key] = self.counters.get(key, 0) + value

    def text(self, engine: Engine, pools: dict[str, WorkPool]) -> str:
        lines = [f"refactx_{k} {v}" for k, v in sorted(self.counters.items())]
        for name, pool in sorted(pools.items()):
            lines.append(f'refactx_pool_admitted{{pool="{name}"}} {pool.admitted}')
            lines.append(f'refactx_pool_running{{pool="{name}"}} {pool.running}')
            lines.append(f'refactx_pool_done_total{{pool="{name}"}} {pool.done}')
            lines.append(f'refactx_pool_refused_total{{pool="{name}"}} {pool.refused}')
        lines.append(f"refactx_constraint_seconds_total {engine.constraint_seconds:.6f}")
        lines.append(f"refactx_batches_total {engine.batches}")
        for name, index in engine.indexes.items():
            stats = getattr(index, "stats", None)
            if stats is not None:
                lines.append(f'refactx_index_lookups_total{{index="{name}"}} {stats.lookups}')
                lines.append(f'refactx_index_round_trips_total{{index="{name}"}} {stats.round_trips}')
        return "\n".join(lines) + "\n"


class _Refused(Exception):
    def __init__(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers


def _error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


def prompt_token_limit(engine: Engine, settings: ServerSettings) -> int:
    """The longest prompt a request may send: ``settings.max_prompt_tokens``, else the
    model's context less the longest answer."""
    if settings.max_prompt_tokens is not None:
        return settings.max_prompt_tokens
    context = getattr(engine, "context_length", None) or 4096
    return max(1, context - settings.max_new_tokens)


def longest_token_bytes(engine: Engine) -> int | None:
    """The most UTF-8 bytes one token of the engine's vocabulary stands for (its added and
    special tokens too); None when the engine does not say."""
    try:
        texts = engine.vocabulary.continuation_texts
    except AttributeError:
        return None
    longest = max((len(t.encode("utf-8", "surrogatepass")) for t in texts if t), default=0)
    added = getattr(engine.tokenizer, "get_added_vocab", None)
    if callable(added):
        longest = max([longest, *(len(str(t).encode("utf-8", "surrogatepass")) for t in added())])
    return longest or None


# a tokenizer's normalizer may shorten text before it is split (NFKC: a 3-byte full-width
# letter becomes a 1-byte one): the byte bound on a prompt leaves this factor for it
_NORMALIZER_SLACK = 3
# a prompt of more characters than this many a token is first tokenized by its head alone
_PROBE_CHARS_PER_TOKEN = 8


# ---------------------------------------------------------------------- request checks
def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Refused(400, f"{what} must be a string", "invalid_request")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (\\ud800) is valid JSON, not text
        raise _Refused(400, f"{what} is not valid Unicode text (a lone surrogate at {exc.start})",
                       "invalid_request") from exc
    return value


def _integer(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int:  # noqa: E721 - bool is an int, and true is not a count
        raise _Refused(400, f"{name} must be an integer, not {json.dumps(value)[:40]}", "invalid_request")
    return value


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Refused(400, f"{name} must be a finite number, not {json.dumps(value)[:40]}", "invalid_request")
    return float(value)


def check_fields(body: dict[str, Any], chat: bool) -> None:
    """Refuse a field this server does not read, or one whose meaning it cannot honour."""
    known = _CHAT_FIELDS if chat else _COMPLETION_FIELDS
    for name, value in body.items():
        if name in known or name in _IGNORED_FIELDS:
            continue
        if name in _REFUSED_FIELDS:
            if value is None or value in _REFUSED_FIELDS[name]:
                continue
            raise _Refused(400, f"{name!r} is not supported by this server (docs/server-api.md)",
                           "unsupported_field")
        raise _Refused(400, f"unknown field {_text(name, 'a field name')[:40]!r}; this endpoint reads "
                            f"{sorted(known)}", "unknown_field")
    n = _integer(body, "n")
    if n is not None and n != 1:
        raise _Refused(400, "n must be 1: this server returns one choice per request", "unsupported_field")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise _Refused(400, "stream must be true or false", "invalid_request")


def _content(message: dict[str, Any], i: int) -> str:
    content = message.get("content")
    if isinstance(content, list):  # text parts, joined; any other part is refused
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _Refused(400, f"messages[{i}].content: only text parts are supported", "invalid_request")
            parts.append(_text(part.get("text"), f"messages[{i}].content[].text"))
        return "".join(parts)
    return _text(content, f"messages[{i}].content")


def chat_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    """The conversation as sent, checked: roles system/user/assistant, text content, the last
    turn the user's non-empty question."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Refused(400, "messages must be a non-empty list of {role, content}", "invalid_request")
    turns = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _Refused(400, f"messages[{i}] must be an object {{role, content}}", "invalid_request")
        extra = set(message) - {"role", "content", "name"}
        if extra:
            raise _Refused(400, f"messages[{i}]: unsupported keys {sorted(map(str, extra))}", "invalid_request")
        role = message.get("role")
        if role not in _ROLES:
            raise _Refused(400, f"messages[{i}].role must be one of {list(_ROLES)}, not "
                                f"{json.dumps(role)[:40]}", "invalid_request")
        turns.append({"role": role, "content": _content(message, i)})
    if turns[-1]["role"] != "user":
        raise _Refused(400, "the last message must be the user's question", "invalid_request")
    if not turns[-1]["content"].strip():
        raise _Refused(400, "the question (the last message) is empty", "invalid_request")
    return turns


def create_app(engine: Engine, settings: ServerSettings = ServerSettings()):
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    metrics = _Metrics()
    in_flight = {"n": 0}
    tokenizer = engine.tokenizer
    prompt_limit = prompt_token_limit(engine, settings)
    context = getattr(engine, "context_length", None)
    token_bytes = longest_token_bytes(engine)
    # a prompt of more bytes than this cannot fit in prompt_limit tokens: refused unread
    prompt_byte_limit = None if token_bytes is None else prompt_limit * token_bytes * _NORMALIZER_SLACK
    pings: dict[str, tuple[float, "asyncio.Future[str | None]"]] = {}
    pools = {"encode": WorkPool("encode", settings.encode_workers, settings.encode_max_waiting),
             "explore": WorkPool("explore", settings.explore_workers, settings.explore_max_waiting),
             "ping": WorkPool("ping", settings.ping_workers, settings.ping_max_waiting)}

    def error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
        metrics.add("errors_total", kind=kind)
        return JSONResponse(_error_body(status, message, kind), status_code=status, headers=headers)

    app = FastAPI(title="refactx", description=__doc__)
    app.add_middleware(_Guard, settings=settings, refuse=error)
    # the page at / (page.py): in front of the guard, so added after it, with the guard's Host check
    mount_page(app, _Guard(None, settings, None)._host_allowed)
    app.state.pools = pools
    app.router.on_shutdown.append(lambda: [pool.close() for pool in pools.values()])

    def failure(job: Job) -> tuple[int, str, str]:
        if isinstance(job.error, BuildRetired):  # retention dropped the build it read
            return 503, f"{job.error}; retry the request", "build_retired"
        if isinstance(job.error, (DatabaseUnavailable, QueryTimeout)):
            return 503, f"the index's database does not answer: {job.error}", "database_unavailable"
        if job.finish_reason == "timeout":
            return 504, f"no answer within {settings.request_timeout_s:g} s", "timeout"
        return 500, f"generation failed: {type(job.error).__name__}", "engine_error"

    def job_error(job: Job) -> JSONResponse:
        status, message, kind = failure(job)
        return error(status, message, kind, {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None)

    @app.exception_handler(_Refused)
    async def refused(_request, exc: _Refused):
        return error(exc.status, exc.message, exc.kind, exc.headers)

    @app.exception_handler(PoolFull)
    async def busy(_request, exc: PoolFull):
        return error(503, f"the server is busy: {exc}; retry later", "server_busy",
                     {"Retry-After": str(BUSY_RETRY_AFTER_S)})

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, exc: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                             for e in exc.errors()[:5])
        return error(422, f"invalid request: {problems}", "invalid_request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, exc: StarletteHTTPException):
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error(exc.status_code, str(exc.detail), kind)

    @app.exception_handler(Exception)
    async def internal(_request, exc: Exception):  # a bug: logged, never shown to the client
        log.error("internal error", exc_info=exc)
        return error(500, "internal error (logged by the server)", "internal_error")

    async def body_of(request: Request) -> dict[str, Any]:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > settings.max_body_bytes:
            raise _Refused(413, f"the body is over {settings.max_body_bytes} bytes", "request_too_large")
        raw = bytearray()
        async for part in request.stream():
            raw += part
            if len(raw) > settings.max_body_bytes:
                raise _Refused(413, f"the body is over {settings.max_body_bytes} bytes", "request_too_large")
        try:
            # UTF-8 only (RFC 8259): json.loads would take UTF-16 and UTF-32 bytes as well
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Refused(400, f"the body is not UTF-8 text (a byte {raw[exc.start]:#04x} at offset {exc.start}); "
                                "send JSON encoded in UTF-8", "invalid_json") from None
        try:
            body = json.loads(text)
        except RecursionError as exc:
            raise _Refused(400, "the body is not JSON this server reads: nested too deeply", "invalid_json") from exc
        except ValueError as exc:
            if "integer string conversion" in str(exc):  # Python's cap on an integer's digits
                raise _Refused(400, f"the body holds a number of more than {sys.get_int_max_str_digits()} digits; no field "
                                    "takes one", "invalid_json") from None
            raise _Refused(400, f"the body is not JSON: {exc}", "invalid_json") from exc
        if not isinstance(body, dict):
            raise _Refused(400, "the body must be a JSON object", "invalid_request")
        return body

    def index_of(body: dict[str, Any]) -> str | None:
        options = body.get("refactx")
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise _Refused(400, '"refactx" must be an object, e.g. {"index": "NAME"}', "invalid_request")
        extra = set(options) - {"index", "prompt", "grounded", "beams"}
        if extra:
            raise _Refused(400, f'"refactx" takes "index", "prompt", "grounded" and "beams", not '
                                f'{sorted(map(str, extra))}', "invalid_request")
        if options.get("prompt", "refactx") not in ("refactx", "none"):
            raise _Refused(400, '"refactx.prompt" is "refactx" or "none"', "invalid_request")
        index = options.get("index", settings.default_index)
        if index is not None:
            index = _text(index, "refactx.index")
            if index not in engine.indexes:
                raise _Refused(404, f"unknown index {index!r}; served: {sorted(engine.indexes)}", "index_not_found")
        return index

    def grounded_of(body: dict[str, Any], index: str | None) -> bool:
        """``refactx.grounded``: the answer an object of a stored fact the reply wrote."""
        grounded = (body.get("refactx") or {}).get("grounded", False)
        if not isinstance(grounded, bool):
            raise _Refused(400, '"refactx.grounded" is true or false', "invalid_request")
        if grounded and index is None:
            raise _Refused(400, '"refactx.grounded" needs an index: its answers come from the facts written',
                           "invalid_request")
        if grounded and not getattr(engine, "grounded_answers", False):
            raise _Refused(400, '"refactx.grounded" is served by the transformers engine (refactx serve --engine '
                                'transformers)', "invalid_request")
        return grounded

    def beams_of(body: dict[str, Any], index: str | None, params: dict[str, Any]) -> int:
        """``refactx.beams``: the width of a constrained beam search (1: none)."""
        beams = (body.get("refactx") or {}).get("beams", 1)
        most = getattr(engine, "max_beams", 1)
        if type(beams) is not int or beams < 1:  # noqa: E721 - bool is an int, and true is not a width
            raise _Refused(400, f'"refactx.beams" must be an integer >= 1, not {json.dumps(beams)[:40]}',
                           "invalid_request")
        if beams == 1:
            return 1
        if most == 1:
            raise _Refused(400, '"refactx.beams" is served by the vLLM engine (refactx serve --engine vllm)',
                           "invalid_request")
        if beams > most:
            raise _Refused(400, f'"refactx.beams" must be 1..{most}, not {beams}', "invalid_request")
        if index is None:
            raise _Refused(400, '"refactx.beams" needs an index: the beams are constrained by it', "invalid_request")
        if params["temperature"] != 0:
            raise _Refused(400, '"refactx.beams" decodes greedily: temperature must be 0', "invalid_request")
        if params["grounded"]:
            raise _Refused(400, '"refactx.beams" and "refactx.grounded" cannot be combined', "invalid_request")
        if body.get("stream"):
            raise _Refused(400, '"refactx.beams" answers once the search ends: stream must be false',
                           "invalid_request")
        return beams

    def check_model(body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and _text(model, "model") != settings.model_name:
            raise _Refused(404, f"unknown model {model[:80]!r}; this server serves {settings.model_name!r}",
                           "model_not_found")

    def decoding(body: dict[str, Any]) -> dict[str, Any]:
        """The request's token limit and sampling, checked (before any tokenizing)."""
        max_tokens = _integer(body, "max_tokens")
        if max_tokens is None:
            max_tokens = _integer(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = settings.max_new_tokens
        if not 1 <= max_tokens <= settings.max_new_tokens:
            raise _Refused(422, f"max_tokens must be 1..{settings.max_new_tokens}, not {max_tokens}",
                           "invalid_max_tokens")
        temperature = _number(body, "temperature")
        temperature = 0.0 if temperature is None else temperature
        if temperature < 0:
            raise _Refused(400, f"temperature must be >= 0, not {temperature:g}", "invalid_request")
        top_p = _number(body, "top_p")
        top_p = 1.0 if top_p is None else top_p
        if not 0 < top_p <= 1:
            raise _Refused(400, f"top_p must be in (0, 1], not {top_p:g}", "invalid_request")
        seed = _integer(body, "seed")
        if seed is not None and not 0 <= seed < 1 << 63:
            raise _Refused(400, "seed must be in 0..2**63-1", "invalid_request")
        return {"max_new_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "seed": seed}

    def check_prompt_bytes(chat: bool, body: dict[str, Any], turns: list[dict[str, str]] | None) -> None:
        """Refuse, before any tokenizing, a prompt whose text is too long for its tokens to
        fit the limit whatever they are."""
        if prompt_byte_limit is None:
            return
        texts = [t["content"] for t in turns] if chat else [body["prompt"]]
        size = sum(len(t.encode("utf-8")) for t in texts)
        if size > prompt_byte_limit:
            raise _Refused(413, f"the prompt has {size} bytes of text, more than the {prompt_byte_limit} that "
                                f"{prompt_limit} tokens can hold; the limit is {prompt_limit} tokens (refactx serve "
                                "--max-prompt-tokens)",
                           "prompt_too_long")

    def job_for(prompt_ids: list[int], index: str | None, params: dict[str, Any]) -> Job:
        if len(prompt_ids) > prompt_limit:
            raise _Refused(413, f"the prompt has {len(prompt_ids)} tokens; the limit is {prompt_limit} "
                                "(refactx serve --max-prompt-tokens)", "prompt_too_long")
        if context is not None and len(prompt_ids) + params["max_new_tokens"] > context:
            raise _Refused(400, f"the prompt's {len(prompt_ids)} tokens and max_tokens {params['max_new_tokens']} "
                                f"are over the model's context of {context} tokens", "context_length_exceeded")
        return Job(prompt_ids=prompt_ids, index=index, deadline=time.monotonic() + settings.request_timeout_s,
                   **params)

    def chat_turns(body: dict[str, Any], index: str | None) -> list[dict[str, str]]:
        turns = chat_messages(body)
        options = body.get("refactx") or {}
        if options.get("prompt", "refactx") == "refactx" and not any(t["role"] == "system" for t in turns):
            # the prompt that explains the index's trigger (Fact:, or Path: over a path index),
            # its worked examples, then the conversation as sent
            prompt = index_prompt(engine.indexes[index]) if index is not None else Prompt()
            turns = prompt.messages(turns[-1]["content"])[:-1] + turns
        return turns

    def encode(chat: bool, body: dict[str, Any], turns: list[dict[str, str]] | None) -> list[int]:
        texts = [t["content"] for t in turns] if chat else [body["prompt"]]
        probe = prompt_limit * _PROBE_CHARS_PER_TOKEN
        if sum(map(len, texts)) > probe:
            # a long text: its head alone tells most over-long prompts, at a bounded cost (a cut
            # changes the tokens of the one word it falls in)
            counted = sum(max(0, len(tokenizer(t[:probe], add_special_tokens=False)["input_ids"]) - 1)
                          for t in texts)
            if counted > prompt_limit:
                raise _Refused(413, f"the prompt has over {counted} tokens; the limit is {prompt_limit} "
                                    "(refactx serve --max-prompt-tokens)", "prompt_too_long")
        try:
            if chat:
                return encode_chat(tokenizer, turns)
            return list(tokenizer(body["prompt"], add_special_tokens=False)["input_ids"])
        except Exception as exc:  # noqa: BLE001 - the chat template refuses an order of turns
            raise _Refused(400, f"the prompt cannot be encoded for this model: {str(exc)[:200]}",
                           "invalid_request") from exc

    def facts_json(job: Job) -> list[dict[str, Any]]:
        return [{"text": f.text, "stored": f.stored, "complete": f.complete, "token_ids": list(f.token_ids),
                 "provenance": asdict(f.provenance) if f.provenance else None}
                for f in job.facts]

    def usage(job: Job) -> dict[str, int]:
        return {"prompt_tokens": len(job.prompt_ids), "completion_tokens": len(job.output_ids),
                "total_tokens": len(job.prompt_ids) + len(job.output_ids)}

    async def database_down(name: str, fresh: bool = False) -> str | None:
        """Why the database of index ``name`` does not answer (None: it does, or the index
        lives in memory). One bounded check a second answers every request meanwhile;
        ``fresh``: a new check unless one is under way (``/ready``)."""
        index = engine.indexes[name]
        if not hasattr(index, "ping"):
            return None
        now = time.monotonic()
        held = pings.get(name)
        if held is None or (held[1].done() and (fresh or now - held[0] > _PING_TTL_S)):
            timeout = settings.db_check_timeout_s

            async def check() -> str | None:
                try:
                    await asyncio.wait_for(pools["ping"].run(index.ping, timeout), timeout + 1.0)
                    return None
                except asyncio.TimeoutError:
                    return f"no answer within {timeout:g} s"
                except PoolFull as exc:
                    return f"not checked: {exc}"
                except RefactxError as exc:
                    return str(exc)
                except Exception as exc:  # noqa: BLE001 - a cause for every waiter, never an unretrieved task
                    log.warning("database check of index %r failed", name, exc_info=exc)
                    return f"the check failed ({type(exc).__name__})"

            held = (now, asyncio.ensure_future(check()))
            pings[name] = held
        return await asyncio.shield(held[1])

    def take_place() -> None:
        if in_flight["n"] >= settings.max_concurrent:
            raise _Refused(429, f"more than {settings.max_concurrent} requests in flight; retry later",
                           "too_many_requests", {"Retry-After": "1"})
        in_flight["n"] += 1

    def leave_place() -> None:
        in_flight["n"] -= 1

    async def until_disconnect(request: Request) -> None:
        """Return when the client of a request whose body was read goes away."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def serve(request: Request, chat: bool):
        take_place()
        try:
            body = await body_of(request)
            check_fields(body, chat)
            check_model(body)
            index = index_of(body)
            params = decoding(body)
            params["grounded"] = grounded_of(body, index)
            params["beams"] = beams_of(body, index, params)
            turns = chat_turns(body, index) if chat else None
            if not chat:
                _text(body.get("prompt"), "prompt")
                if not body["prompt"]:
                    raise _Refused(400, "prompt must be a non-empty string", "invalid_request")
            check_prompt_bytes(chat, body, turns)
            # a long prompt is tokenized off the event loop, on the encoding pool's threads:
            # other clients, explorations and probes are answered meanwhile
            prompt_ids = await pools["encode"].run(encode, chat, body, turns)
            job = job_for(prompt_ids, index, params)
            if index is not None:
                down = await database_down(index)
                if down is not None:
                    raise _Refused(503, f"the database of index {index!r} does not answer: {down}",
                                   "database_unavailable", {"Retry-After": str(RETRY_AFTER_S)})
        except BaseException:
            leave_place()
            raise
        metrics.add("requests_total", endpoint="chat" if chat else "completions")
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        model = settings.model_name
        if body.get("stream"):
            return StreamingResponse(stream(job, rid, created, model, chat), media_type="text/event-stream")
        try:
            runner = asyncio.ensure_future(engine.run(job))
            gone = asyncio.ensure_future(until_disconnect(request))
            try:
                await asyncio.wait({runner, gone}, timeout=settings.request_timeout_s,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
                if not runner.done():  # over its time, its client gone, or the server stopping
                    job.cancelled = True
                    runner.cancel()
            if not runner.done() or runner.cancelled():
                if gone.done() and not gone.cancelled():
                    metrics.add("cancelled_total")
                    return error(499, "the client closed the connection", "client_closed")
                return error(504, f"no answer within {settings.request_timeout_s:g} s", "timeout")
            if runner.exception() is not None:
                raise _Refused(503, "the server is shutting down", "shutting_down")
        finally:
            leave_place()
        if job.error is not None or job.finish_reason in ("timeout", "cancelled"):
            if job.error is None and job.finish_reason == "cancelled":
                return error(503, "the server is shutting down", "shutting_down")
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

        def error_event(status: int, message: str, kind: str) -> bytes:
            metrics.add("errors_total", kind=kind)
            return f"data: {json.dumps(_error_body(status, message, kind))}\n\n".encode()

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
            if runner.exception() is not None:
                yield error_event(503, "the server is shutting down", "shutting_down")
                return
            if job.error is not None or job.finish_reason == "timeout":
                yield error_event(*failure(job))
                return
            if job.finish_reason == "cancelled":
                yield error_event(503, "the server is shutting down", "shutting_down")
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
            leave_place()

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
            down = await database_down(name, fresh=True)
            if down is None and not hasattr(index, "ping"):
                try:
                    await pools["ping"].run(index.next_tokens, [])
                except PoolFull as exc:
                    down = f"not checked: {exc}"
                except RefactxError as exc:  # reported, the server keeps serving
                    down = str(exc)
            if down is not None:
                broken[name] = down
        if broken:
            metrics.add("errors_total", kind="not_ready")
            return JSONResponse({"status": "not ready", "indexes": broken, "error": _error_body(
                503, f"indexes not ready: {sorted(broken)}", "not_ready")["error"]},
                status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
        return {"status": "ready", "model": settings.model_name, "indexes": sorted(engine.indexes)}

    @app.get("/metrics")
    async def metrics_text():
        return PlainTextResponse(metrics.text(engine, pools), media_type="text/plain; version=0.0.4")

    def index_named(name: str):
        if name not in engine.indexes:
            raise _Refused(404, f"unknown index {name!r}; served: {sorted(engine.indexes)}", "index_not_found")
        return engine.indexes[name]

    def labels(found) -> list[dict[str, Any]]:
        return [{"label": x.label, "facts": x.facts} for x in found]

    def check_limit(limit: int) -> int:
        if not 0 <= limit <= settings.max_explore_limit:
            raise _Refused(422, f"limit must be 0..{settings.max_explore_limit}, not {limit}", "invalid_request")
        return limit

    def database_refusal(name: str, why: Any) -> _Refused:
        return _Refused(503, f"the database of index {name!r} does not answer: {why}", "database_unavailable",
                        {"Retry-After": str(RETRY_AFTER_S)})

    async def explored(name: str, call, *args: Any, **kwargs: Any) -> Any:
        """``call(index, tokenizer, *args, budget=..., **kwargs)`` on the exploration pool,
        counted in flight. The walk checks its budget (which counts its wait for a thread) at
        every step and stops there (tree/explore.py), so its thread is free when the 504 is
        sent; only a single lookup that blocks past the request timeout is answered while its
        thread still runs (it keeps its place in the pool until it ends; a database lookup
        has its own bounds). An index whose database does not answer gets 503 before any
        walk, and after a walk that ran out of time."""
        index = index_named(name)
        down = await database_down(name)
        if down is not None:
            raise database_refusal(name, down)
        take_place()
        try:
            budget = explore.Budget(settings.explore_timeout_s)
            work = pools["explore"].run(call, index, tokenizer, *args, budget=budget, **kwargs)
            return await asyncio.wait_for(work, max(settings.explore_timeout_s, settings.request_timeout_s))
        except (explore.WalkTimeout, asyncio.TimeoutError):
            down = await database_down(name, fresh=True)
            if down is not None:
                raise database_refusal(name, down) from None
            raise _Refused(504, f"the exploration took over {settings.explore_timeout_s:g} s; narrow it",
                           "timeout") from None
        except (DatabaseUnavailable, QueryTimeout) as exc:
            raise database_refusal(name, exc) from None
        finally:
            leave_place()

    @app.get("/v1/indexes")
    async def indexes():
        return {"data": [{"name": n, "facts": ix.info.facts, "build_id": ix.info.build_id}
                         for n, ix in sorted(engine.indexes.items())]}

    @app.get("/v1/indexes/{name}/entities")
    async def entities(name: str, q: str = "", limit: int = 20):
        found = await explored(name, explore.entities, _text(q, "q"), check_limit(limit))
        return {"data": labels(found)}

    @app.get("/v1/indexes/{name}/relations")
    async def relations(name: str, entity: str, limit: int = 100):
        found = await explored(name, explore.relations, _text(entity, "entity"), check_limit(limit))
        return {"data": labels(found)}

    @app.get("/v1/indexes/{name}/objects")
    async def objects(name: str, entity: str, relation: str, limit: int = 100):
        found = await explored(name, explore.objects, _text(entity, "entity"), _text(relation, "relation"),
                               check_limit(limit))
        return {"data": labels(found)}

    @app.get("/v1/indexes/{name}/facts")
    async def facts(name: str, prefix: str = "", offset: int = 0, limit: int = 50):
        if not 0 <= offset <= settings.max_explore_offset:
            raise _Refused(422, f"offset must be 0..{settings.max_explore_offset}, not {offset} "
                                "(narrow the prefix instead)", "invalid_request")
        page = await explored(name, explore.facts_page, _text(prefix, "prefix"), offset=offset,
                              limit=check_limit(limit))
        return {"data": page, "offset": offset}

    return app


class _Guard:
    """ASGI middleware in front of every route: one Host header, among the allowed hosts; the
    API key on ``/v1/*`` and ``/metrics`` (``/health`` and ``/ready`` stay open to probes;
    the ``Bearer`` scheme in any case, RFC 9110); a query string of percent-encoded UTF-8 (the
    framework would put U+FFFD in place of a bad byte, and a walk would then match labels that
    merely start with a cut character); and a JSON body in UTF-8 on every POST."""

    OPEN_PATHS = ("/health", "/ready")

    def __init__(self, app, settings: ServerSettings, refuse) -> None:
        self.app, self.settings, self.refuse = app, settings, refuse
        self.hosts = {h.lower().strip("[]") for h in settings.allowed_hosts}
        self.key = settings.api_key.encode() if settings.api_key else None

    def _host_allowed(self, host: str) -> bool:
        if "*" in self.hosts:
            return True
        host = host.strip().lower()
        if host.startswith("["):  # [::1]:8000
            name = host[1:host.find("]")] if "]" in host else host
        else:
            name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        return name in self.hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v for k, v in scope["headers"]}
        hosts = sum(k.lower() == b"host" for k, _ in scope["headers"])
        refusal = None
        if hosts > 1:
            refusal = (400, f"the request has {hosts} Host headers; send one", "invalid_request", None)
        elif not self._host_allowed(headers.get("host", b"").decode("latin-1")):
            refusal = (400, "the Host header names a host this server does not serve (refactx serve "
                            "--allowed-hosts)", "host_not_allowed", None)
        elif self.key is not None and scope["path"] not in self.OPEN_PATHS:
            scheme, _, given = headers.get("authorization", b"").strip().partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.key):
                refusal = (401, "a valid API key is required: Authorization: Bearer <key>", "unauthorized",
                           {"WWW-Authenticate": "Bearer"})
        if refusal is None and scope.get("query_string"):
            try:
                parse_qsl(scope["query_string"].decode("ascii"), keep_blank_values=True, encoding="utf-8",
                          errors="strict")
            except UnicodeDecodeError:
                refusal = (400, "the query string is not percent-encoded UTF-8", "invalid_request", None)
        if refusal is None and scope["method"] == "POST":
            kind, _, params = headers.get("content-type", b"").partition(b";")
            charset = next((v.strip().strip(b'"').lower() for k, _, v in
                            (p.strip().partition(b"=") for p in params.split(b";")) if k.strip().lower() == b"charset"),
                           b"utf-8")
            if kind.strip().lower() != b"application/json":
                refusal = (415, "the body must be JSON, sent with Content-Type: application/json",
                           "unsupported_media_type", None)
            elif charset not in (b"utf-8", b"utf8"):
                refusal = (415, f"the body must be JSON in UTF-8, not {charset.decode('latin-1')[:40]}",
                           "unsupported_media_type", None)
        if refusal is not None:
            return await self.refuse(*refusal)(scope, receive, send)
        return await self.app(scope, receive, send)
