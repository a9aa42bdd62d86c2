"""Errors shared by the adapters."""


class AdapterUnavailable(ImportError):
    """The framework an adapter instruments is not installed (or too old)."""
