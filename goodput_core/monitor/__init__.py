"""The monitor: one background loop from the store to the exporters.

``loop`` holds :class:`Monitor` (``from goodput_core.monitor import Monitor``), ``cycle``
what one cycle computes besides runtime goodput and what a busy exporter is owed,
``runner`` the thread each exporter runs on, ``background_start`` building a monitor off
the caller's thread. The exporters themselves are in :mod:`goodput_core.exporters`.
"""

__all__ = ["Monitor"]


def __getattr__(name):
    # The loop imports the calculator (numpy): load it on first use so that importing
    # goodput_core.monitor.background_start (done by adapters at import) stays cheap.
    if name == "Monitor":
        # lazy: numpy (background_start imports this package and stays light)
        from goodput_core.monitor.loop import Monitor

        return Monitor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
