"""The Google Cloud Logging store: :class:`CloudLoggingStore` in :mod:`.store` and
the reference's entry format and queries in :mod:`.wire` (no Google import)."""

__all__ = ["CloudLoggingStore"]


def __getattr__(name):
    # Imported on first use: the store needs the Google client (the 'gcp' extra),
    # while checking a URL (.wire) must work without it.
    if name == "CloudLoggingStore":
        from goodput_core.stores.cloud_logging.store import CloudLoggingStore

        return CloudLoggingStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
