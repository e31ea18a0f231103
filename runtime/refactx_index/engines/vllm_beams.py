"""Constrained beam search over vLLM: the fact constraint inside every beam.

vLLM's own beam search is an outer loop of one-token requests without ``extra_args``, so
a logits processor never sees it. :func:`beam_search` is such a loop that keeps the
constraint: every running beam of every prompt is one request per step (``max_tokens=1``,
prefix caching makes the shared prefix cheap), and a :class:`~refactx_index.constraint.batch.BatchMatcher`
holds each beam's fact state. A beam outside a fact asks for its top log-probabilities
(``logprobs``); a beam inside one asks for the log-probabilities of exactly the ids the
matcher allows (``logprob_token_ids``, at most 128 a request: larger sets are split over
requests of the same prefix). Those are the model's raw log-probabilities, masked --
what transformers' beam search scores after a logits processor -- so the selection below,
which follows transformers' (``num_beams``, ``length_penalty``, ``early_stopping=False``: the
top ``2 x beams`` continuations of all beams, finished hypotheses kept among the top
``beams``, its early-stop heuristic), picks the same beams where both engines compute the
same log-probabilities::

    from vllm import LLM
    from refactx_index.engines.vllm_beams import beam_search
    llm = LLM(model=..., enable_prefix_caching=True)
    best = beam_search(llm, [prompt_ids], index, beam_width=3, max_tokens=64)[0][0]
    best.tokens, best.facts

Each prompt gets its hypotheses best first (:class:`BeamHypothesis`: tokens, score, and the
facts its tokens wrote, as the matcher read them).

A beam ends on any end-of-sequence id of the model's one
:class:`~refactx_index.vocab.Vocabulary` (the model config's and the generation config's, as
:meth:`FactConstraint.for_vocabulary <refactx_index.engines.core.FactConstraint.for_vocabulary>`
takes them): the ids where the mask forces a dead end and where the fact server's reader ends
a row, so a beam ends a row exactly where they do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..constraint.batch import BatchMatcher
from ..constraint.matcher import FACT, FactMatcher
from ..errors import InputRefused
from ..tree.index import ServedBuild, TreeIndex
from ..vocab import Vocabulary, VocabularyLike, as_vocabulary, open_model_vocabulary
from .core import index_trigger, trigger_variants


__all__ = ["BeamHypothesis", "beam_search", "candidates_per_step", "constrained_beams", "gather_scores",
           "score_requests"]

# vLLM's bound on one request's logprob_token_ids (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS)
MAX_IDS_PER_REQUEST = 128


def candidates_per_step(beam_width: int, eos_count: int) -> int:
    """How many continuations of a prompt's beams a step keeps (transformers' ``max(2, 1 +
    end ids) x beams``): the log-probabilities an unconstrained beam asks its engine for."""
    return max(2, 1 + eos_count) * max(beam_width, 1)


@dataclass
class BeamHypothesis:
    tokens: list[int]
    score: float  # summed log-probability / generated length ** length_penalty
    facts: list[tuple[int, ...]] = field(default_factory=list)


@dataclass
class _Running:
    tokens: list[int]
    logprob: float  # summed


def beam_search(llm: Any, prompts: Sequence[Sequence[int]], index: TreeIndex, *, beam_width: int = 3,
                max_tokens: int = 64, length_penalty: float = 1.0, vocabulary: Vocabulary | None = None,
                trigger: str | None = None, in_fact: Sequence[bool] | None = None) -> list[list[BeamHypothesis]]:
    """Beam search over ``llm`` (a ``vllm.LLM``) for each prompt (token ids), every beam
    constrained by ``index`` (the module doc). ``vocabulary``: the model's (default: that of
    the engine's model directory, :func:`~refactx_index.vocab.open_model_vocabulary`), whose
    end-of-sequence ids end a beam; ``trigger``: the index's (``Fact:``) by default."""
    from vllm import SamplingParams  # vLLM is an optional dependency: imported where it is used

    def score(requests: list[tuple[list[int], np.ndarray | None]], top: int) -> list[dict[int, float]]:
        """One step of the engine: per request, the log-probabilities of its allowed ids, or
        its ``top`` best ones where it is unconstrained."""
        prompts_, params, owners = score_requests(requests, top, SamplingParams)
        outputs = llm.generate(prompts_, params, use_tqdm=False)
        return gather_scores(len(requests), owners, [out.outputs[0].logprobs[0] for out in outputs])

    if vocabulary is None:
        vocabulary = open_model_vocabulary(llm.model_config.model)
    return constrained_beams(score, vocabulary, prompts, index, beam_width=beam_width, max_tokens=max_tokens,
                             length_penalty=length_penalty, trigger=trigger, in_fact=in_fact)


def score_requests(requests: list[tuple[list[int], np.ndarray | None]], top: int,
                   sampling_params: Any) -> tuple[list[dict[str, list[int]]], list[Any], list[tuple[int, set[int] | None]]]:
    """The one-token vLLM requests of a step (``sampling_params``: vLLM's ``SamplingParams``
    class): a request per unconstrained beam asking for its ``top`` log-probabilities, and per
    constrained beam one per 128 allowed ids; with each request's owner (beam, allowed ids)."""
    prompts_, params, owners = [], [], []
    free = sampling_params(max_tokens=1, temperature=0, logprobs=top, detokenize=False)
    for k, (ids, allowed) in enumerate(requests):
        if allowed is None:
            prompts_.append({"prompt_token_ids": list(ids)})
            params.append(free)
            owners.append((k, None))
            continue
        for at in range(0, max(allowed.size, 1), MAX_IDS_PER_REQUEST):
            chunk = allowed[at: at + MAX_IDS_PER_REQUEST].tolist()
            prompts_.append({"prompt_token_ids": list(ids)})
            params.append(sampling_params(max_tokens=1, temperature=0, logprob_token_ids=chunk, detokenize=False))
            owners.append((k, set(chunk)))
    return prompts_, params, owners


def gather_scores(n: int, owners: list[tuple[int, set[int] | None]], logprobs: list[Any]) -> list[dict[int, float]]:
    """Each of ``n`` beams' next-token log-probabilities from its requests' answers (vLLM's
    ``{token: Logprob}`` of each request's one position, in the order of ``owners``)."""
    got: list[dict[int, float]] = [{} for _ in range(n)]
    for (k, allowed_set), answer in zip(owners, logprobs):
        for tok, lp in answer.items():
            if allowed_set is None or tok in allowed_set:  # the sampled token may be outside them
                got[k].setdefault(int(tok), lp.logprob)
    return got


def constrained_beams(score: Callable[[list[tuple[list[int], np.ndarray | None]], int], list[dict[int, float]]],
                      vocabulary: VocabularyLike, prompts: Sequence[Sequence[int]], index: TreeIndex, *, beam_width: int,
                      max_tokens: int, length_penalty: float, eos_ids: Sequence[int] | None = None,
                      trigger: str | None = None, in_fact: Sequence[bool] | None = None,
                      build: ServedBuild | None = None) -> list[list[BeamHypothesis]]:
    """The search itself, over any engine: ``score(requests, top)`` gives, for each request
    ``(token ids, allowed ids or None)``, the log-probabilities of the next token -- of the
    allowed ids, or the ``top`` best where unconstrained (:func:`beam_search` asks vLLM).
    ``eos_ids``: the ids that end a beam, by default ``vocabulary``'s (the module doc);
    ``build``: the index's build every beam reads (default: the serving one now)."""
    vocabulary = as_vocabulary(vocabulary)
    eos = {int(e) for e in (vocabulary.eos_ids if eos_ids is None else eos_ids)}
    if not eos:
        raise InputRefused(f"vocabulary {vocabulary.name!r} names no end-of-sequence id: a beam could not end")
    vocab = vocabulary.logits_size
    width = max(beam_width, 1)
    keep = candidates_per_step(width, len(eos))
    triggers = trigger_variants(vocabulary, trigger or index_trigger(index))
    matcher = BatchMatcher(FactMatcher(index, triggers, sorted(eos)), capacity=len(prompts) * width)
    if build is None:
        build = index.serving_build()  # one build for every beam, first step to last
    n = len(prompts)
    prompts = [[int(t) for t in p] for p in prompts]
    slots = np.arange(n * width)
    matcher.add(slots, [prompts[i // width] for i in slots], None if in_fact is None
                else [bool(in_fact[i // width]) for i in slots], build=build)
    running: list[list[_Running]] = [[_Running([], 0.0)] for _ in range(n)]
    finished: list[list[BeamHypothesis]] = [[] for _ in range(n)]
    searching = [True] * n  # transformers' early-stop heuristic not yet satisfied

    for step in range(max_tokens):
        mask = matcher.mask(slots, vocab)
        allowed_of = {int(r): np.unique(mask.tokens[mask.token_rows == r]) for r in mask.rows.tolist()}
        requests, owners = [], []
        for p in range(n):
            if searching[p]:
                for j, beam in enumerate(running[p]):
                    requests.append((prompts[p] + beam.tokens, allowed_of.get(p * width + j)))
                    owners.append((p, j))
        if not requests:
            break
        candidates: list[dict[tuple[int, int], float]] = [{} for _ in range(n)]  # (beam, token) -> logprob
        for (p, j), logprobs in zip(owners, score(requests, keep)):
            base = running[p][j].logprob
            for tok, lp in logprobs.items():
                candidates[p][(j, tok)] = base + lp
        parents = slots.copy()
        chosen = np.zeros(slots.size, dtype=np.int64)
        alive = np.zeros(slots.size, dtype=bool)
        generated = step + 1
        last = step + 1 == max_tokens
        for p in range(n):
            if not searching[p]:
                continue
            # transformers' order: by score, ties by position (beam, then token id: its topk
            # over beams x vocabulary)
            top = sorted(((lp, j, tok) for (j, tok), lp in candidates[p].items()),
                         key=lambda c: (-c[0], c[1], c[2]))[:keep]
            for rank, (lp, j, tok) in enumerate(top):
                if (tok in eos or last) and rank < width:
                    finished[p].append(BeamHypothesis(running[p][j].tokens + [tok],
                                                      lp / generated ** length_penalty))
            finished[p] = sorted(finished[p], key=lambda h: -h.score)[:width]
            nxt = [(lp, j, tok) for lp, j, tok in top if tok not in eos and not last][:width]
            running[p] = [_Running(running[p][j].tokens + [tok], lp) for lp, j, tok in nxt]
            for k, (_, j, tok) in enumerate(nxt):
                parents[p * width + k] = p * width + j
                chosen[p * width + k] = tok
                alive[p * width + k] = True
            # the early-stop heuristic (early_stopping=False): the best running beam, at its
            # current length, cannot beat the worst of a full set of finished hypotheses
            if len(finished[p]) == width and running[p]:
                best_possible = running[p][0].logprob / generated ** length_penalty
                if best_possible <= finished[p][-1].score:
                    searching[p] = False
            if not running[p]:
                searching[p] = False
        matcher.gather(parents)
        if alive.any():
            matcher.step(slots[alive], chosen[alive])
        if not any(searching):
            break
    results = []
    for p in range(n):
        hyps = finished[p] or [BeamHypothesis(b.tokens, b.logprob / max(len(b.tokens), 1) ** length_penalty)
                               for b in running[p]]
        for h in hyps:
            h.facts = _facts(index, triggers, sorted(eos), prompts[p], h.tokens,
                             bool(in_fact[p]) if in_fact is not None else False, build)
        results.append(hyps)
    return results


def _facts(index: TreeIndex, triggers: list[list[int]], eos: list[int], prompt: list[int],
           tokens: list[int], in_fact: bool, build) -> list[tuple[int, ...]]:
    """The facts ``tokens`` wrote after ``prompt``, as the matcher reads them (one written up
    to the end of the sequence included)."""
    m = BatchMatcher(FactMatcher(index, triggers, eos), capacity=1)
    m.add([0], [prompt], [in_fact], build=build)
    for tok in tokens:
        m.step(np.asarray([0]), np.asarray([tok]))
    facts = m.generated(0)
    if m.mode_of(0) == FACT and bool(m.ends[0]):  # cut by the length limit where a fact may end
        facts.append(m.fact_prefix(0))
    return facts
