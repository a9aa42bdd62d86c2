"""Alias of :mod:`goodput_core.queries.run_groups`: ``goodput_core.run_groups``, the path
earlier docs showed for record_run_group (the same module object: attributes
and patches are shared)."""
import sys; import goodput_core.queries.run_groups as _m; sys.modules[__name__] = _m  # noqa: E702
