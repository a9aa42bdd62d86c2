"""Suite-wide pytest configuration.

Deliberately (almost) empty: with ``tests/__init__.py`` present, pytest imports
this file as ``tests.conftest`` and puts the repository root on ``sys.path``,
so test modules can ``import tests.support...`` under a plain ``pytest`` run
as well as under ``python -m pytest``.
"""
