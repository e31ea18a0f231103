"""The runtime's one compiled module; everything else is in pyproject.toml.

``refactx_index._fragment`` decodes a row's body (``format.decode_fragment``). It is optional:
where no C compiler is at hand the install still succeeds and numpy decodes the same rows,
slower on large ones (``format.DECODER`` says which; tests/test_format.py checks that the
project's own install has it).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("refactx_index._fragment", ["refactx_index/_fragment.c"], optional=True)])
