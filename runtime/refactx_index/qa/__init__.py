"""Question answering: load a model, ask it a question constrained to an index, evaluate answers."""
