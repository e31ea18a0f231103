"""A team's own graph: the rules (``rules``), the Spark stage that replaces parse, sitelinks and
labels (``stage``) and the in-process index build without Spark (``index``).

Layer 3 (docs/architecture.md): imports the foundation, ``catalog`` and ``stages``.
"""
