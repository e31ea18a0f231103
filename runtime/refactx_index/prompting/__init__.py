"""What the model is told and the tries it writes from: the fact prompt (Fact:) and the per-question path tries (Path:)."""
