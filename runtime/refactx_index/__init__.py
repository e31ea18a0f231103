"""refactx_index: prefix-tree indexes of knowledge-graph facts for constrained generation.

Importing the package loads only the exception classes; numpy and psycopg are
imported when an index is opened, torch/transformers only by
the engine adapters in ``refactx_index.engines`` (optional extras).

    from refactx_index import open_index
    index = open_index("postgresql://...", "wikidata-qwen2.5", vocabulary="path/to/tokenizer.json")
    index.next_tokens([...])  # NextTokens(tokens, leaves, ends)
"""

from __future__ import annotations

import importlib

from .errors import (
    ConfigError,
    DatabaseUnavailable,
    FormatError,
    IndexNotFound,
    InputRefused,
    QueryTimeout,
    RefactxError,
    VocabularyMismatch,
)

# typing's own constant, without importing typing: `import refactx_index` (and `refactx --help`)
# stays as light as its errors
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .tree.cache import ByteLRUCache
    from .tree.format import FORMAT_VERSION
    from .tree.index import IndexInfo, NextTokens, TreeIndex
    from .tree.memory import MemoryTreeIndex, build_rows
    from .tree.pg import PgTreeIndex, open_index

__version__ = "0.1.0"

# name -> module that defines it; resolved on first access (PEP 562)
_LAZY = {
    "FORMAT_VERSION": ".tree.format",
    "ByteLRUCache": ".tree.cache",
    "IndexInfo": ".tree.index",
    "NextTokens": ".tree.index",
    "TreeIndex": ".tree.index",
    "MemoryTreeIndex": ".tree.memory",
    "build_rows": ".tree.memory",
    "PgTreeIndex": ".tree.pg",
    "open_index": ".tree.pg",
    "RefactxLogitsProcessor": ".engines.transformers",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "FORMAT_VERSION",
    "ByteLRUCache",
    "ConfigError",
    "DatabaseUnavailable",
    "FormatError",
    "IndexInfo",
    "IndexNotFound",
    "InputRefused",
    "MemoryTreeIndex",
    "NextTokens",
    "PgTreeIndex",
    "QueryTimeout",
    "RefactxError",
    "RefactxLogitsProcessor",
    "TreeIndex",
    "VocabularyMismatch",
    "build_rows",
    "open_index",
]
