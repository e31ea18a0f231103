"""The transformers logits processor, under the import path it was first published at.

It now lives with the other engine adapters: :mod:`refactx_index.engines.transformers`.
"""

from __future__ import annotations

from .engines.transformers import DEAD, FACT, FREE, RefactxLogitsProcessor, RowState, trigger_variants

__all__ = ["DEAD", "FACT", "FREE", "RefactxLogitsProcessor", "RowState", "trigger_variants"]
