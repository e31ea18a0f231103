"""The prefix tree of facts: its row format, the index over PostgreSQL or in memory, its cache, the provenance of its facts, and walks over it (completions, facts, entities)."""
