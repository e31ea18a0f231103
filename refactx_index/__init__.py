"""refactx_index: prefix-tree indexes of knowledge-graph facts for constrained generation.

The runtime imports only numpy and psycopg (lazily); torch/transformers are optional.
"""

from .errors import (
    ConfigError,
    DatabaseUnavailable,
    FormatError,
    IndexNotFound,
    LoadError,
    QueryTimeout,
    RefactxError,
    ValidationFailed,
    VocabularyMismatch,
)
from .format import FORMAT_VERSION

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "ConfigError",
    "DatabaseUnavailable",
    "FormatError",
    "IndexNotFound",
    "LoadError",
    "QueryTimeout",
    "RefactxError",
    "ValidationFailed",
    "VocabularyMismatch",
]
