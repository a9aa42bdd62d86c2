"""Alias of :mod:`goodput_core.record.watchdog`: ``goodput_core.watchdog``, the path
earlier docs showed for HangSettings (the same module object: attributes
and patches are shared)."""
import sys; import goodput_core.record.watchdog as _m; sys.modules[__name__] = _m  # noqa: E702
