"""Vocabularies: one :class:`Vocabulary` value per tokenizer, settled once per process.

Shared by the tokenize job (driver and Python workers) and the runtime, so it
imports neither pyspark nor ``tokenizers`` at module level.

A vocabulary is named in configuration by a directory holding ``tokenizer.json``,
a path to such a file, or a hub name (resolved through ``huggingface_hub`` to a
locally cached ``tokenizer.json``). It is identified by the sha256 of that file:
an index built with one file is only valid for the same file.

A model's vocabulary (:func:`open_model_vocabulary`, from a model directory; a GGUF file is
converted to one by :mod:`refactx_index.qa.models`) adds what a generation engine needs and
the tokenizer alone cannot tell: the width of the model's logits (which may exceed the
tokenizer's size) and every end-of-sequence id (the model config's and the generation
config's). The fact server, its vLLM worker, ``ask`` and ``eval`` all take their ids from
this one value, so they agree on where a row ends. :func:`as_vocabulary` makes one of a
tokenizer object or a path at an API's edge; everything inside takes a ``Vocabulary``.

Tokenizers are always returned with ``encode_special_tokens = True``: a fact
whose text happens to contain ``<|endoftext|>`` or ``</s>`` is encoded as those
characters, never as the special token.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
import threading
import weakref
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np

from .errors import ConfigError

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase


TOKENIZER_FILE = "tokenizer.json"
# Names in tokenizer_config.json / special_tokens_map.json whose tokens must never
# appear inside a stored fact.
_SPECIAL_ROLES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


@dataclass(frozen=True)
class Vocabulary:
    """One vocabulary as the pipeline, the runtime and every engine see it (module doc).

    The tokenizer's facts (``name`` .. ``forbidden_ids``) come from its ``tokenizer.json``;
    the model's (``logits_size``, ``eos_ids``) from the model directory beside it, where
    there is one. The pre-tokenizer facts the fact encoder relies on (``encodes_by_pieces``,
    ``ascii_tokenizer``) are derived once, on first use."""

    name: str
    path: str  # as configured: a directory, a tokenizer.json, or a hub name
    file: str  # the resolved local tokenizer.json ("" for a tokenizer given as an object)
    sha256: str  # of the tokenizer.json bytes (of its serialization for an object)
    vocab_size: int  # including added tokens
    # ids never allowed in a stored fact: special added tokens, BOS/EOS/UNK/PAD of the
    # tokenizer config, ids the post-processor inserts, added tokens that strip spaces
    forbidden_ids: tuple[int, ...]
    # the rows of the model's logits: the model config's vocab_size where it is larger (a
    # padded embedding); 0: the tokenizer's size
    model_vocab_size: int = 0
    # every id that ends a generation: the model config's eos_token_id, the generation
    # config's (Llama-3 Instruct adds <|eot_id|> there), else the tokenizer config's eos_token
    eos_ids: tuple[int, ...] = ()
    pad_id: int | None = None
    special_ids: tuple[int, ...] = ()  # added tokens marked special
    added_tokens: tuple[str, ...] = ()  # the text of every added token, special or not
    loaded: "Tokenizer | None" = field(default=None, compare=False, repr=False)

    def tokenizer(self) -> "Tokenizer":
        """The tokenizer set up for facts, loaded once per process (cached by file and hash)."""
        if self.loaded is not None:
            return self.loaded
        return cached_tokenizer(self.file, self.sha256)

    @property
    def logits_size(self) -> int:
        """How many token ids a mask covers: the model's logits' width."""
        return max(self.model_vocab_size, self.vocab_size)

    @property
    def from_file(self) -> bool:
        """Whether ``sha256`` fingerprints a ``tokenizer.json`` (an index records that one)."""
        return bool(self.file)

    @cached_property
    def encodes_by_pieces(self) -> bool:
        """Whether facts are encoded by their pieces (:func:`facts_encode_by_pieces`)."""
        return facts_encode_by_pieces(self.tokenizer())

    @cached_property
    def ascii_tokenizer(self) -> "Tokenizer | None":
        """The tokenizer without a normalizer that leaves ASCII alone (:func:`tokenizer_for_ascii`)."""
        return tokenizer_for_ascii(self.tokenizer())

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, without special tokens (special tokens' texts encoded as text)."""
        return [e.ids for e in self.tokenizer().encode_batch(list(texts), add_special_tokens=False)]

    def continuation(self, ids: Sequence[int]) -> str:
        """The text ``ids`` add after other text (:func:`decode_continuation`)."""
        return decode_continuation(self.tokenizer(), ids)

    @property
    def continuation_texts(self) -> tuple[str | None, ...]:
        """Each id's :meth:`continuation` alone (:func:`continuation_texts`)."""
        return continuation_texts(self.tokenizer())

    def with_model(self, directory: str | Path) -> "Vocabulary":
        """This vocabulary with the model facts of ``directory`` (``config.json``,
        ``generation_config.json``, ``tokenizer_config.json``)."""
        return _with_model_facts(self, Path(directory))


# what an API's edge accepts for a vocabulary (as_vocabulary turns each into one)
VocabularyLike = Union[Vocabulary, "Tokenizer", "PreTrainedTokenizerBase", str, os.PathLike]


def resolve_tokenizer_file(path: str) -> Path:
    """The local ``tokenizer.json`` for a directory, a file, or a hub name."""
    if not path:
        raise ConfigError("vocabulary path is empty: give a directory with tokenizer.json, a file, or a hub name")
    local = Path(path).expanduser()
    if local.is_dir():
        candidate = local / TOKENIZER_FILE
        if not candidate.is_file():
            raise ConfigError(f"vocabulary directory {local} has no {TOKENIZER_FILE}")
        return candidate
    if local.is_file():
        return local
    if local.is_absolute() or path.startswith((".", "~")) or path.count("/") > 1:
        raise ConfigError(f"vocabulary path {path} does not exist")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(f"vocabulary {path!r} is not a local path and huggingface_hub is not installed") from exc
    try:
        return Path(hf_hub_download(path, TOKENIZER_FILE))
    except Exception as exc:  # the hub raises many types (offline, gated, missing file)
        raise ConfigError(f"vocabulary {path!r}: not a local path and not loadable from the hub: {exc}") from exc


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_tokenizer(file: str | Path) -> "Tokenizer":
    """A fresh tokenizer from a ``tokenizer.json``, with special tokens encoded as text."""
    from tokenizers import Tokenizer

    return _for_facts(Tokenizer.from_file(str(file)))


def open_tokenizer(path: str) -> "Tokenizer":
    """The tokenizer of a directory, a ``tokenizer.json`` or a hub name, loaded for facts."""
    return load_tokenizer(resolve_tokenizer_file(path))


def special_token_ids(tokenizer: "Tokenizer") -> tuple[int, ...]:
    """Ids of the added tokens marked special (what a tokenizer object alone can tell)."""
    return tuple(sorted(i for i, tok in tokenizer.get_added_tokens_decoder().items() if tok.special))


def _for_facts(tokenizer: "Tokenizer") -> "Tokenizer":
    """Special tokens encoded as text; no truncation or padding (a long fact is a reject, not cut)."""
    tokenizer.encode_special_tokens = True
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


_cache: dict[tuple[str, str], "Tokenizer"] = {}
_cache_lock = threading.Lock()


def cached_tokenizer(file: str | Path, sha256: str) -> "Tokenizer":
    """The tokenizer of ``file``, loaded once per process and checked against ``sha256``.

    Spark reuses Python workers between tasks, so each worker reads and parses the
    file once. A file that changed since the driver hashed it is an error, not a
    silent mix of two vocabularies in one index.
    """
    key = (str(file), sha256)
    with _cache_lock:
        tokenizer = _cache.get(key)
        if tokenizer is None:
            actual = file_sha256(file)
            if actual != sha256:
                raise ConfigError(f"{file}: sha256 {actual} differs from the expected {sha256} (file changed?)")
            tokenizer = load_tokenizer(file)
            _cache[key] = tokenizer
        return tokenizer


def cached_tokenizer_from_bytes(data: bytes, sha256: str) -> "Tokenizer":
    """The tokenizer serialized in ``data`` (a tokenizer.json), parsed once per process.

    Spark ships the file's bytes to Python workers inside the task closure, so
    executors need no shared file system; each worker parses them once.
    """
    key = ("<bytes>", sha256)
    with _cache_lock:
        tokenizer = _cache.get(key)
        if tokenizer is None:
            actual = hashlib.sha256(data).hexdigest()
            if actual != sha256:
                raise ConfigError(f"tokenizer bytes have sha256 {actual}, expected {sha256}")
            from tokenizers import Tokenizer

            tokenizer = _for_facts(Tokenizer.from_buffer(data))
            _cache[key] = tokenizer
        return tokenizer


# Normalizers that leave ASCII text as it is: the Unicode normal forms (every ASCII
# string is in each of them).
_ASCII_INVARIANT_NORMALIZERS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})


def _leaves_ascii_unchanged(spec: Any) -> bool:
    if spec is None:
        return True
    if not isinstance(spec, dict):
        return False
    if spec.get("type") == "Sequence":
        return all(_leaves_ascii_unchanged(child) for child in spec.get("normalizers") or [])
    return spec.get("type") in _ASCII_INVARIANT_NORMALIZERS


def tokenizer_for_ascii(tokenizer: "Tokenizer") -> "Tokenizer | None":
    """A copy of ``tokenizer`` without its normalizer, for ASCII text only; None if there is none to skip.

    Given only when the normalizer leaves ASCII text unchanged (Unicode normal forms:
    Qwen2.5's NFC), so the copy yields the same ids for ASCII text while skipping the
    normalizer's work (about an eighth of Qwen2.5's encoding time). Any other
    normalizer (SentencePiece's ``Prepend``/``Replace``, ``Lowercase``...) gives None.
    """
    normalizer = tokenizer.normalizer
    if normalizer is None or not _leaves_ascii_unchanged(json.loads(normalizer.__getstate__())):
        return None
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.normalizer = None
    copy.encode_special_tokens = tokenizer.encode_special_tokens
    return copy


_ascii_cache: dict[str, "Tokenizer | None"] = {}


def cached_ascii_tokenizer_from_bytes(data: bytes, sha256: str) -> "Tokenizer | None":
    """``tokenizer_for_ascii`` of ``cached_tokenizer_from_bytes(data, sha256)``, built once per process."""
    tokenizer = cached_tokenizer_from_bytes(data, sha256)
    with _cache_lock:
        if sha256 not in _ascii_cache:
            _ascii_cache[sha256] = tokenizer_for_ascii(tokenizer)
        return _ascii_cache[sha256]


def _config_special_tokens(directory: Path) -> set[str]:
    """Token strings named as BOS/EOS/UNK/PAD/... beside the tokenizer.json."""
    names: set[str] = set()
    for fname in ("tokenizer_config.json", "special_tokens_map.json"):
        path = directory / fname
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
        for role in _SPECIAL_ROLES:
            value = data.get(role)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str) and value:
                names.add(value)
        for value in data.get("additional_special_tokens") or []:
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                names.add(value)
    return names


def _post_processor_tokens(spec: Any) -> set[str]:
    """Special token strings a post-processor may insert (TemplateProcessing, BERT, ...)."""
    found: set[str] = set()
    if isinstance(spec, dict):
        if spec.get("type") == "TemplateProcessing":
            found.update((spec.get("special_tokens") or {}).keys())
        for key in ("sep", "cls"):
            value = spec.get(key)
            if isinstance(value, list) and value and isinstance(value[0], str):
                found.add(value[0])
        for child in spec.get("processors") or []:
            found |= _post_processor_tokens(child)
    return found


def forbidden_token_ids(tokenizer: "Tokenizer", file: str | Path) -> tuple[int, ...]:
    """Ids that must never appear in a stored fact, sorted.

    - every added token marked special;
    - BOS/EOS/UNK/PAD... named in ``tokenizer_config.json``/``special_tokens_map.json``
      beside the file, and the tokens the post-processor inserts (Llama-3 and Mistral
      add BOS by default);
    - added tokens that strip the spaces around them (Phi-3's ``</s>`` is a
      non-special added token with ``rstrip``: text containing it would not
      decode back to itself).
    """
    file = Path(file)
    ids: set[int] = set()
    for token_id, added in tokenizer.get_added_tokens_decoder().items():
        if added.special or added.lstrip or added.rstrip:
            ids.add(int(token_id))
    spec = json.loads(file.read_text(encoding="utf-8")).get("post_processor")
    for token in _config_special_tokens(file.parent) | _post_processor_tokens(spec):
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            ids.add(int(token_id))
    return tuple(sorted(ids))


def open_vocabulary(name: str, path: str) -> Vocabulary:
    """Resolve, hash and inspect a configured vocabulary (on the driver)."""
    file = resolve_tokenizer_file(path)
    sha256 = file_sha256(file)
    tokenizer = cached_tokenizer(file, sha256)
    return Vocabulary(
        name=name,
        path=path,
        file=str(file),
        sha256=sha256,
        vocab_size=int(tokenizer.get_vocab_size(with_added_tokens=True)),
        forbidden_ids=forbidden_token_ids(tokenizer, file),
        special_ids=special_token_ids(tokenizer),
        added_tokens=tuple(t.content for _, t in sorted(tokenizer.get_added_tokens_decoder().items())),
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _ids(value: Any) -> list[int]:
    """An ``eos_token_id`` field: an id, a list of ids, or absent."""
    if value is None:
        return []
    values = [value] if isinstance(value, int) else value
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ConfigError(f"eos_token_id must be an id or a list of ids, not {value!r}")
    return [int(v) for v in values]


def _token_id(tokenizer: "Tokenizer", spec: Any) -> int | None:
    if isinstance(spec, dict):
        spec = spec.get("content")
    return tokenizer.token_to_id(spec) if isinstance(spec, str) and spec else None


def _with_model_facts(vocabulary: Vocabulary, directory: Path) -> Vocabulary:
    """``vocabulary`` with the logits' width and end ids the model directory's configs give."""
    config = _read_json(directory / "config.json")
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    generation = _read_json(directory / "generation_config.json")
    tokenizer_config = _read_json(directory / "tokenizer_config.json")
    tokenizer = vocabulary.tokenizer()
    eos = _ids(config.get("eos_token_id", text_config.get("eos_token_id")))
    eos += [e for e in _ids(generation.get("eos_token_id")) if e not in eos]
    if not eos:
        named = _token_id(tokenizer, tokenizer_config.get("eos_token"))
        eos = [named] if named is not None else []
    pad = generation.get("pad_token_id", config.get("pad_token_id"))
    if not isinstance(pad, int):
        pad = _token_id(tokenizer, tokenizer_config.get("pad_token"))
    size = config.get("vocab_size", text_config.get("vocab_size"))
    return replace(vocabulary, model_vocab_size=int(size) if isinstance(size, int) else 0,
                   eos_ids=tuple(eos), pad_id=pad)


_models: dict[tuple[str, int, int], Vocabulary] = {}


def open_model_vocabulary(directory: str | Path) -> Vocabulary:
    """The vocabulary of a transformers model directory (``tokenizer.json`` and its configs),
    settled once per process: a second call for the same unchanged directory returns the
    same value, its tokenizer already loaded."""
    directory = Path(directory).expanduser().resolve()
    file = directory / TOKENIZER_FILE
    if not file.is_file():
        raise ConfigError(f"model directory {directory} has no {TOKENIZER_FILE}: a fast tokenizer is required")
    stat = file.stat()
    key = (str(directory), stat.st_size, stat.st_mtime_ns)
    with _cache_lock:
        held = _models.get(key)
    if held is None:
        held = open_vocabulary(directory.name, str(directory)).with_model(directory)
        if not held.eos_ids:
            raise ConfigError(f"model directory {directory}: no eos_token_id in config.json, "
                              "generation_config.json or tokenizer_config.json: a dead end could not be ended")
        with _cache_lock:
            held = _models.setdefault(key, held)
    return held


_objects: "weakref.WeakKeyDictionary[Any, Vocabulary]" = weakref.WeakKeyDictionary()


def vocabulary_of(tokenizer: "Tokenizer | PreTrainedTokenizerBase") -> Vocabulary:
    """The vocabulary of a tokenizer object: a ``tokenizers.Tokenizer`` or a transformers fast
    tokenizer (whose backend is copied and set up for facts; the object is not modified). One
    value per object; its fingerprint is the sha256 of the tokenizer's serialization, which
    differs from its file's, so an index is checked against it on stored facts."""
    try:
        held = _objects.get(tokenizer)
    except TypeError:  # not weakly referenceable
        held = None
    if held is not None:
        return held
    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(tokenizer, Tokenizer):
        fast = tokenizer
    elif isinstance(backend, Tokenizer):
        fast = _for_facts(Tokenizer.from_str(backend.to_str()))
    else:
        raise ConfigError(f"not a tokenizer with a tokenizer.json: {type(tokenizer).__name__} "
                          "(a tokenizers.Tokenizer or a transformers fast tokenizer is required)")
    eos = getattr(tokenizer, "eos_token_id", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    vocabulary = Vocabulary(
        name=str(getattr(tokenizer, "name_or_path", "") or ""), path="", file="",
        sha256=hashlib.sha256(fast.to_str().encode("utf-8")).hexdigest(),
        vocab_size=int(fast.get_vocab_size(with_added_tokens=True)),
        forbidden_ids=special_token_ids(fast), eos_ids=(int(eos),) if isinstance(eos, int) else (),
        pad_id=pad if isinstance(pad, int) else None, special_ids=special_token_ids(fast),
        added_tokens=tuple(t.content for _, t in sorted(fast.get_added_tokens_decoder().items())),
        loaded=fast)
    with contextlib.suppress(TypeError):
        _objects[tokenizer] = vocabulary
    return vocabulary


def as_vocabulary(value: VocabularyLike) -> Vocabulary:
    """A :class:`Vocabulary` of what an API's caller gave: the value itself, a tokenizer
    object (:func:`vocabulary_of`), or a path -- a model directory (with ``config.json``:
    :func:`open_model_vocabulary`), a tokenizer's directory or its ``tokenizer.json``."""
    if isinstance(value, Vocabulary):
        return value
    if isinstance(value, (str, os.PathLike)):
        path = Path(value).expanduser()
        if path.is_dir() and (path / "config.json").is_file() and (path / TOKENIZER_FILE).is_file():
            return open_model_vocabulary(path)
        name = (path if path.is_dir() else path.parent).name
        return open_vocabulary(name, os.fspath(value))
    return vocabulary_of(value)


_continuation_texts: dict[int, tuple[Any, tuple[str | None, ...]]] = {}
_continuation_texts_lock = threading.Lock()


def continuation_texts(tokenizer: "Tokenizer") -> tuple[str | None, ...]:
    """Each id's text as the continuation of other text (:func:`decode_continuation` of it
    alone), ``None`` where the decoder does not extend the anchor's text. Decoded in one
    ``decode_batch`` (about a second at 262k ids), once per tokenizer object (a few are kept)."""
    with _continuation_texts_lock:
        held = _continuation_texts.get(id(tokenizer))
    if held is not None and held[0] is tokenizer:
        return held[1]
    anchor = tokenizer.encode("a", add_special_tokens=False).ids
    head = tokenizer.decode(anchor, skip_special_tokens=False)
    decoded = tokenizer.decode_batch([[*anchor, i] for i in range(tokenizer.get_vocab_size(with_added_tokens=True))],
                                     skip_special_tokens=False)
    texts = tuple(t[len(head):] if t.startswith(head) else None for t in decoded)
    _hold(_continuation_texts, _continuation_texts_lock, tokenizer, texts, 4)
    return texts


def _hold(store: dict[int, tuple[Any, Any]], lock: threading.Lock, tokenizer: "Tokenizer", value: Any, most: int) -> None:
    """Keep ``value`` for ``tokenizer`` in ``store`` (keyed by its id, the object held so the id
    stays its own), at most ``most`` tokenizers: the oldest goes."""
    with lock:
        if len(store) >= most:
            store.pop(next(iter(store)))
        store[id(tokenizer)] = (tokenizer, value)


def decode_continuation(tokenizer: "Tokenizer", ids: Sequence[int]) -> str:
    """The text ``ids`` add when they follow other text, leading spaces included.

    SentencePiece decoders (Mistral, Llama-2, Phi-3: a ``Strip`` decoder step)
    drop one leading space of a *whole* sequence, so ``decode([▁<, ...])`` returns
    ``"<..."`` although the ids encode ``" <..."``. A fact always follows other
    text (``Fact:``), so the faithful reading is as a continuation: decode it
    after an anchor token and remove the anchor's own text.
    """
    anchor = tokenizer.encode("a", add_special_tokens=False).ids
    head = tokenizer.decode(anchor, skip_special_tokens=False)
    full = tokenizer.decode(list(anchor) + list(ids), skip_special_tokens=False)
    if not full.startswith(head):  # pragma: no cover - no known decoder does this
        raise ConfigError("decoder output does not extend the anchor's text")
    return full[len(head):]


# --------------------------------------------------------------------------- encoding by pieces
# The byte-level BPE vocabularies below pre-tokenize with a regex that always starts a new
# pre-token at a space followed by a non-space (a space after a non-space begins the next
# match; a run of spaces gives its last one to the next match) and whose only look-ahead,
# (?!\S), reads the same before a space as at the end of a text. BPE never merges across
# pre-tokens, so the ids of a text are the ids of its pieces -- the text cut before such
# spaces -- encoded alone, put together. Any other vocabulary (SentencePiece's Metaspace
# merges across spaces, an unknown regex, a normalizer other than NFC: NFC never composes
# across a space, a starter) encodes whole texts. Facts (encode_facts) and paths (paths.py)
# use it, each checking the derivation on probe texts (PROBE_LABELS) per tokenizer.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
KNOWN_SPLITS = frozenset({QWEN2_SPLIT, LLAMA3_SPLIT})
# labels that exercise the pre-tokenizer's rules at a piece's edges: digits, contractions,
# punctuation runs, combining marks, non-Latin scripts, inner spaces, the separator itself
PROBE_LABELS = ("Alpha", "Leaf 5", "1952-03-11", "O'Neil's", "it's", "U.S.", "C++", "A.", "(band)",
                "x\u0301", "Zu\u0308rich", "Z\u00fcrich", "\u6771\u4eac", "\u041c\u043e\u0441\u043a\u0432\u0430",
                "100 km\u00b2", "a  b", "->", "-> x", "\U0001f389 party", "42", "3.14", "'", "x'")


def has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def _state(component: object | None) -> dict | None:
    return None if component is None else json.loads(component.__getstate__())


def _pieces_are_regex_split(pre: dict | None) -> bool:
    """A pre-tokenizer of the kind described above: GPT-2's ByteLevel regex, or a known Split
    regex before a ByteLevel without its own regex, optionally after Digits (which only adds
    boundaries around digits)."""
    if pre is None:
        return False
    steps = pre["pretokenizers"] if pre.get("type") == "Sequence" else [pre]
    if steps and steps[0].get("type") == "Digits":
        steps = steps[1:]
    if len(steps) == 1:
        (byte_level,) = steps
        return (byte_level.get("type") == "ByteLevel" and byte_level.get("use_regex") is True
                and not byte_level.get("add_prefix_space"))
    if len(steps) == 2:
        split, byte_level = steps
        return (split.get("type") == "Split" and split.get("pattern", {}).get("Regex") in KNOWN_SPLITS
                and split.get("behavior") == "Isolated" and not split.get("invert")
                and byte_level.get("type") == "ByteLevel" and byte_level.get("use_regex") is False
                and not byte_level.get("add_prefix_space"))
    return False


def spaces_start_pretokens(tokenizer: "Tokenizer") -> bool:
    """Whether ``tokenizer`` (a ``tokenizers.Tokenizer``) always begins a pre-token at a space
    followed by a non-space, by its own description (see above): then a text's ids are its
    pieces' ids, the text cut before any such space."""
    model = getattr(tokenizer, "model", None)
    if type(model).__name__ != "BPE" or model.dropout or model.continuing_subword_prefix or model.end_of_word_suffix:
        return False
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        return False
    if _state(tokenizer.normalizer) not in (None, {"type": "NFC"}):
        return False
    # an added token is matched before pre-tokenizing: one holding a space, or eating the
    # spaces beside it, could span two pieces
    if any(has_space(t.content) or t.lstrip or t.rstrip for t in tokenizer.get_added_tokens_decoder().values()):
        return False
    return _pieces_are_regex_split(_state(tokenizer.pre_tokenizer))


# Facts are generated after this trigger text; they are encoded in its context so
# their ids are those a model writes there (see encode_facts).
CONTEXT = "Fact:"

# Outcome of encoding one fact (EncodedFacts.status)
ENCODED_OK = 0
ENCODED_FORBIDDEN_TOKEN = 1  # a special/BOS/EOS/UNK id would be stored
ENCODED_MERGES_WITH_CONTEXT = 2  # the fact's first token fuses with the trigger text
# the reject reason each refused status is counted under (the tokenize stage, in-process builds)
ENCODED_REJECT_REASON = {
    ENCODED_FORBIDDEN_TOKEN: "forbidden_token",
    ENCODED_MERGES_WITH_CONTEXT: "merges_with_context",
}


@dataclass(frozen=True)
class EncodedFacts:
    """Token ids of a batch of facts as flat arrays (Arrow list layout)."""

    offsets: Any  # numpy int64, len n+1: ids of fact i are values[offsets[i]:offsets[i+1]]
    values: Any  # numpy int32
    status: Any  # numpy int8, len n: ENCODED_*

    def ids(self, i: int) -> list[int]:
        return self.values[self.offsets[i]:self.offsets[i + 1]].tolist()


def encode_facts(
    tokenizer: "Tokenizer",
    texts: Sequence[str],
    forbidden_ids: Sequence[int],
    fact_prefix: str = " ",
    fact_suffix: str = "",
    *,
    ascii_tokenizer: "Tokenizer | None" = None,
) -> EncodedFacts:
    """Token ids of ``fact_prefix + text + fact_suffix`` for each text, as a model writes them after ``Fact:``.

    Each text is encoded after the trigger ``CONTEXT`` and the trigger's ids are
    cut off, in one ``encode_batch_fast`` call without special tokens. Encoding in
    context matters for SentencePiece vocabularies that prepend a dummy ``▁``
    (Phi-3): alone, ``" <Danny"`` becomes ``▁ ▁< D…`` (two spaces once it follows
    ``Fact:``); in context it is ``▁< D…``, the ids the model produces. For
    vocabularies without that quirk the ids equal a plain encoding.

    A fact is flagged (``status``), not raised on, when its ids contain a forbidden
    id or when its first token fuses with the trigger (so it has no ids of its own).
    ``decode_continuation(ids) == fact_prefix + text + fact_suffix`` for every fact
    with status ``ENCODED_OK``.

    ``ascii_tokenizer`` (``tokenizer_for_ascii(tokenizer)``), when given, encodes the
    facts whose whole text is ASCII: the same ids without the normalizer's work.

    Where ``facts_encode_by_pieces(tokenizer)`` (Qwen2.5, Llama 3, GPT-2: see "encoding by
    pieces" above), each text is cut before every " <" and each distinct piece of the batch
    is encoded once: a subject's facts are neighbours and properties recur, so a batch holds
    about a quarter of its text in distinct pieces (the realistic facts: 2.6x faster on one
    thread). The ids are the whole texts' ids. Everything after the encoder is array work
    (numpy), none per token in Python.
    """

    context_ids = np.asarray(tokenizer.encode(CONTEXT, add_special_tokens=False).ids, dtype=np.int32)
    k = len(context_ids)
    n = len(texts)
    lead = f"{CONTEXT}{fact_prefix}"
    strings = [f"{lead}{text}{fact_suffix}" for text in texts]
    encode = _encode_by_pieces if facts_encode_by_pieces(tokenizer) else encode_flat
    lengths, full = encode(tokenizer, ascii_tokenizer, strings)
    full_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=full_offsets[1:])

    status = np.zeros(n, dtype=np.int8)
    starts = full_offsets[:-1]
    # the first k ids of each row must be the trigger's own ids; they are dropped
    context_kept = lengths >= k
    keep = np.ones(len(full), dtype=bool)
    for j in range(k):
        inside = lengths > j
        position = starts[inside] + j
        context_kept[inside] &= full[position] == context_ids[j]
        keep[position] = False
    status[~context_kept] = ENCODED_MERGES_WITH_CONTEXT
    values = full[keep] if k else full
    fact_lengths = np.maximum(lengths - k, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(fact_lengths, out=offsets[1:])
    if len(forbidden_ids) and len(values):
        bad = np.isin(values, np.asarray(forbidden_ids, dtype=np.int32))
        if bad.any():
            bad_rows = np.unique(np.searchsorted(offsets, np.flatnonzero(bad), side="right") - 1)
            status[bad_rows] = np.where(status[bad_rows] == ENCODED_OK, ENCODED_FORBIDDEN_TOKEN, status[bad_rows])
    return EncodedFacts(offsets=offsets, values=values, status=status)


def encode_flat(tokenizer: "Tokenizer", ascii_tokenizer: "Tokenizer | None",
                strings: list[str]) -> tuple[Any, Any]:
    """Each string's ids without special tokens, as (lengths, the ids of all strings in one
    flat int32 array); the ASCII strings through ``ascii_tokenizer`` when given."""

    id_lists = [e.ids for e in _encode_batch(tokenizer, ascii_tokenizer, strings)]
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    values = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int32, count=int(lengths.sum()))
    return lengths, values


def gather_pieces(values: Any, starts: Any, lengths: Any, rows: Any) -> Any:
    """The ids of the pieces ``rows`` (indexes into a store whose piece ``r`` holds
    ``values[starts[r]:starts[r] + lengths[r]]``), put together in one flat array."""

    taken = lengths[rows]
    # every piece's ids copied to its place: source = its row's start + the position within it
    out_starts = np.cumsum(taken) - taken
    return values[np.repeat(starts[rows] - out_starts, taken) + np.arange(int(taken.sum()))]


# where a fact's text is cut into pieces: before the " <" of each of its parts
FACT_PIECE_CUT = re.compile(r"(?= <)")


def _encode_by_pieces(tokenizer: "Tokenizer", ascii_tokenizer: "Tokenizer | None",
                      strings: list[str]) -> tuple[Any, Any]:
    """``encode_flat``'s result, from the strings' pieces (cut by ``FACT_PIECE_CUT``), each
    distinct piece encoded once; valid where ``spaces_start_pretokens(tokenizer)``."""

    parts = [FACT_PIECE_CUT.split(s) for s in strings]
    counts = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    flat = list(itertools.chain.from_iterable(parts))
    del parts
    # each piece's row among the distinct pieces, in first-seen order
    rows: dict[str, int] = {}
    piece_row = np.fromiter((rows.setdefault(p, len(rows)) for p in flat), dtype=np.int64, count=len(flat))
    del flat
    distinct_lengths, distinct_values = encode_flat(tokenizer, ascii_tokenizer, list(rows))
    distinct_starts = np.cumsum(distinct_lengths) - distinct_lengths
    values = gather_pieces(distinct_values, distinct_starts, distinct_lengths, piece_row)
    lengths = distinct_lengths[piece_row]
    first_piece = np.cumsum(counts) - counts
    text_lengths = np.add.reduceat(lengths, first_piece) if len(strings) else lengths[:0]
    return text_lengths, values


# fact texts that exercise the cut: labels holding " <", spaces and a newline before it, "<"
# followed by a combining mark NFC composes with it, an added token's text, empty parts
_FACT_PROBES = tuple(f"<{a}> <{b}> <{c}> ." for a, b, c in zip(PROBE_LABELS, PROBE_LABELS[2:], PROBE_LABELS[5:])) + (
    "<a <b> <c  <d> <e\n <f> .", "<\u2260> <<\u0338> < \u0338> .", "<<tool_call>> <x<|endoftext|>> <> .",
    "< <> <  > < < < .", "<O'Neil's> <it's <s> <1952 <5>> .",
)
_piece_checks: dict[int, tuple[Any, bool]] = {}
_piece_checks_lock = threading.Lock()


def facts_encode_by_pieces(tokenizer: "Tokenizer") -> bool:
    """Whether ``encode_facts`` encodes ``tokenizer``'s facts by their pieces: its configuration
    allows it (``spaces_start_pretokens``) and probe facts (``_FACT_PROBES``, after the context)
    get the same ids either way. Decided once per tokenizer object (a few are kept)."""
    with _piece_checks_lock:
        held = _piece_checks.get(id(tokenizer))
    if held is not None and held[0] is tokenizer:
        return held[1]
    allowed = spaces_start_pretokens(tokenizer)
    if allowed:
        probes = [f"{CONTEXT} {text}" for text in _FACT_PROBES]
        whole, pieces = encode_flat(tokenizer, None, probes), _encode_by_pieces(tokenizer, None, probes)
        allowed = all(len(a) == len(b) and bool((a == b).all()) for a, b in zip(whole, pieces))
        if not allowed:
            log.warning("facts cannot be tokenized by their pieces for this tokenizer (probe facts differ): "
                        "they are encoded whole")
    _hold(_piece_checks, _piece_checks_lock, tokenizer, allowed, 8)
    return allowed


def _encode_batch(tokenizer: "Tokenizer", ascii_tokenizer: "Tokenizer | None", strings: list[str]) -> Sequence[Any]:
    """``encode_batch_fast`` of ``strings``, the ASCII ones through ``ascii_tokenizer`` when given."""

    if ascii_tokenizer is None or not strings:
        return tokenizer.encode_batch_fast(strings, add_special_tokens=False)
    is_ascii = np.fromiter(map(str.isascii, strings), dtype=bool, count=len(strings))
    if is_ascii.all():
        return ascii_tokenizer.encode_batch_fast(strings, add_special_tokens=False)
    if not is_ascii.any():
        return tokenizer.encode_batch_fast(strings, add_special_tokens=False)
    every = np.array(strings, dtype=object)
    encodings = np.empty(len(strings), dtype=object)
    for mask, encoder in ((is_ascii, ascii_tokenizer), (~is_ascii, tokenizer)):
        part = encoder.encode_batch_fast(every[mask].tolist(), add_special_tokens=False)
        encodings[mask] = np.fromiter(part, dtype=object, count=len(part))
    return encodings
