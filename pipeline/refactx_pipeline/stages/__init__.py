"""The stages of the Wikidata build, one module each, and what only they share.

``parse`` -> ``sitelinks`` (through ``sqldump``, the MySQL dump reader) -> ``labels`` ->
``verbalize`` (text rules in ``render``) -> ``tokenize`` -> ``prefix_rows`` -> ``load`` ->
``validate`` -> ``activate``; the Parquet schemas between them are ``schemas``. Each module
exposes pure DataFrame functions (what tests call) and the ``run`` the orchestrator calls,
``run(ctx: StageContext) -> StageCounts`` for every stage (``contract``).

Layer 2 (docs/architecture.md): imports the foundation and ``catalog`` only.
"""
