"""The Google Cloud Logging store: :class:`CloudLoggingStore` in :mod:`.store` and
the reference's entry format and queries in :mod:`.wire` (no Google import).
:data:`SCHEME`: its URLs (``cloud-logging://PROJECT/LOG``), for the registry
(:mod:`goodput_core.stores.schemes`)."""

from goodput_core.redact import redact
from goodput_core.stores.base import Store, StoreError, StoreScheme, importable

__all__ = ["CloudLoggingStore", "SCHEME"]


def __getattr__(name):
    # Imported on first use: the store needs the Google client (the 'gcp' extra),
    # while checking a URL (.wire) must work without it.
    if name == "CloudLoggingStore":
        # lazy: the Google client, on first use
        from goodput_core.stores.cloud_logging.store import CloudLoggingStore

        return CloudLoggingStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check(url: str, rest: str, writer: bool) -> None:
    # lazy: only a Cloud Logging URL needs it (import goodput_core stays light)
    from goodput_core.stores.cloud_logging import wire

    project, _, log = rest.partition("/")
    if not project or not log or "/" in log:
        raise StoreError(f"store URL {redact(url)!r} is not cloud-logging://PROJECT/LOG_NAME")
    try:
        wire.validate_names(project, log)
    except ValueError as exc:  # a malformed project id or log name
        raise StoreError(f"store URL {redact(url)!r}: {exc}") from exc
    if not importable("google.cloud.logging_v2"):
        raise StoreError("the cloud-logging store needs the 'gcp' extra: "
                         "pip install 'goodput-core[gcp]'")


def _open(url: str, rest: str, create: bool) -> Store:
    project, _, log = rest.partition("/")
    try:
        # lazy: the Google client, on first use
        from goodput_core.stores.cloud_logging.store import CloudLoggingStore
    except ImportError as exc:
        raise StoreError(
            f"the cloud-logging store needs the 'gcp' extra: pip install 'goodput-core[gcp]' ({exc})"
        ) from exc
    try:
        return CloudLoggingStore(project=project, log_name=log)
    except ValueError as exc:  # a malformed project id or log name
        raise StoreError(f"store URL {redact(url)!r}: {exc}") from exc


# A remote log, slow to read: the dashboard reads it less often.
SCHEME = StoreScheme(("cloud-logging",), _check, _open,
                     read_cache={"min_interval": 2.0, "names_max_age": 10.0})
