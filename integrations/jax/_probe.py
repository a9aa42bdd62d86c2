"""Lazy access to JAX and to the few private JAX helpers we use, defensively.

Nothing here imports jax at module import time: ``goodput_integrations.jax``
must stay importable (and cheap to import) without jax, and must never touch
a backend before the user's ``jax.distributed.initialize()``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional

from goodput_integrations.errors import AdapterUnavailable

logger = logging.getLogger("goodput")

_logged: set = set()
_logged_lock = threading.Lock()


def log_once(key: str, msg: str, *args: Any, exc_info: bool = True) -> None:
    """Logs ``msg`` the first time ``key`` is seen (hooks must not flood logs)."""
    with _logged_lock:
        if key in _logged:
            return
        _logged.add(key)
    logger.warning(msg, *args, exc_info=exc_info)


def require_jax():
    """Returns the ``jax`` module.

    Raises:
      AdapterUnavailable: jax is not installed (or fails to import).
    """
    try:
        import jax
    except ImportError as exc:
        raise AdapterUnavailable(
            "the JAX adapter needs jax: pip install 'goodput-core[jax]'") from exc
    return jax


def xla_bridge() -> Optional[Any]:
    """jax's private xla_bridge module, or None when this jax has none."""
    try:
        from jax._src import xla_bridge as xb
    except Exception:
        return None
    return xb


def backends_initialized() -> Optional[bool]:
    """Whether JAX backends are initialised; None when this jax cannot tell us.

    Reads the private ``_backends`` dict without its lock first: the public-ish
    ``backends_are_initialized()`` takes a non-reentrant lock, and this is
    called from ``jax.monitoring`` listeners, which may run anywhere.
    """
    xb = xla_bridge()
    if xb is None:
        return None
    live = getattr(xb, "_backends", None)
    if isinstance(live, dict):
        return bool(live)
    probe = getattr(xb, "backends_are_initialized", None)
    if probe is None:
        return None
    try:
        return bool(probe())
    except Exception:
        return None


def distributed_process_id() -> Optional[int]:
    """This process's id once ``jax.distributed.initialize`` ran, without touching backends."""
    try:
        from jax._src import distributed
    except Exception:
        return None
    state = getattr(distributed, "global_state", None)
    if state is None or getattr(state, "client", None) is None:
        return None
    pid = getattr(state, "process_id", None)
    return pid if isinstance(pid, int) else None


def current_process_index() -> Optional[int]:
    """``jax.process_index()`` when asking cannot initialise a backend, else None.

    Calling ``jax.process_index()`` before ``jax.distributed.initialize()``
    would initialise the backends as a single-process job and break the
    multi-host start-up, so before the backends exist we only read the
    distributed client's process id.
    """
    ready = backends_initialized()
    if ready is False:
        return distributed_process_id()
    import jax  # `ready is None` (private API gone): assume a backend exists

    return int(jax.process_index())
