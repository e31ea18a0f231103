"""A small BPE vocabulary trained on a graph's own text: the demo's and the examples' tokenizer
when no model vocabulary is at hand (no hub needed)."""

from __future__ import annotations

from pathlib import Path


def train_example_vocabulary(source: Path, out_dir: Path, vocab_size: int = 2000) -> Path:
    """Train a small byte-level BPE vocabulary on a graph's own text (no hub needed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tokenizer.json"
    if path.exists():
        return path
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(source.read_text(encoding="utf-8").splitlines(), trainer=trainer)
    tok.save(str(path))
    return path
