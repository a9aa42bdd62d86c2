"""Alias of :mod:`goodput_core.queries.diagnostics`: ``goodput_core.diagnostics``, the path
earlier docs showed for RunContext, record_config (the same module object: attributes
and patches are shared)."""
import sys; import goodput_core.queries.diagnostics as _m; sys.modules[__name__] = _m  # noqa: E702
