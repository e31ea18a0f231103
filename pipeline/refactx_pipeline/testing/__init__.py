"""Test data made by code, for the tests and the benchmarks: the Wikidata-like dump generator
(``dumpgen``, a package of one concern a module) and the made-up financial graph (``finance_example``).

Beside the layers (docs/architecture.md): it may import any of them, and nothing in the
package imports it.
"""
