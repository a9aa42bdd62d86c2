"""The compiled part of goodput-core (everything else is in pyproject.toml).

``goodput_core.record._native`` writes a training loop's per-step events
(record/native.py). It is optional: where it cannot be built (no C compiler,
no Python headers) the package installs without it and the same recording
runs in Python, a few microseconds a step slower (benchmarks/README.md).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("goodput_core.record._native", ["goodput_core/record/_native.c"],
              optional=True),
])
