"""Engine adapters: the fact constraint inside the engines that serve models.

Each adapter is a thin module over one :class:`~refactx_index.engines.core.FactConstraint`
(requests in slots, one :class:`~refactx_index.constraint.batch.BatchMatcher` per index, one mask
per step). What an engine must give the constraint each step is written at the top of
:mod:`refactx_index.engines.core`; docs/runtime.md lists what each engine supports.

* :mod:`refactx_index.engines.transformers` -- a ``transformers`` logits processor
  (``generate``: greedy, sampling, beam search);
* :mod:`refactx_index.engines.vllm` -- vLLM's logits processors (V1 model runner and
  Model Runner V2), switched on per request;
* :mod:`refactx_index.engines.vllm_beams` -- constrained beam search over vLLM (one request
  per beam and step);
* :mod:`refactx_index.engines.sglang` -- the constraint as an SGLang grammar backend.

Importing this package imports no engine: each adapter imports its engine.
"""
