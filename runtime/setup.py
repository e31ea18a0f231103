"""The runtime's compiled modules; everything else is in pyproject.toml.

``refactx_index.tree._fragment`` decodes a row's body (``format.decode_fragment``);
``refactx_index.constraint._step`` advances the batch matcher's common rows and collects its mask
(``batch.BatchMatcher``). Both are optional: where no C compiler is at hand the install still
succeeds and numpy does the same work, slower (``format.DECODER`` and ``batch.STEPPER`` say
which; tests/runtime/test_format.py and tests/runtime/test_batch_matcher.py check that the project's own
install has them).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("refactx_index.tree._fragment", ["refactx_index/tree/_fragment.c"], optional=True),
    Extension("refactx_index.constraint._step", ["refactx_index/constraint/_step.c"], optional=True),
])
