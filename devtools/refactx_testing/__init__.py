"""Test data made by code, for the tests and the benchmarks: the Wikidata-like dump generator
(``dumpgen``, a package of one concern a module) and the made-up financial graph (``finance_example``).

Not part of either wheel: ``./dev`` installs it into the project's .venv from ``devtools/``
(``python -m refactx_testing.dumpgen``, ``python -m refactx_testing.finance_example``). It
imports nothing of refactx_index or refactx_pipeline, and neither imports it.
"""
