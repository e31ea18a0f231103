"""The fact constraint: the matcher that walks the tree one token at a time, many rows at once, and the masks it gives an engine."""
