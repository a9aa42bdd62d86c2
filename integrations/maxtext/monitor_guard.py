"""Under the launcher, MaxText's own ``maybe_monitor_goodput`` never crashes the job.

MaxText 0.2.5's ``maxtext.common.goodput.maybe_monitor_goodput`` writes to
its config when ``report_performance_metric_for_gcp_monitoring=true``
(``config.enable_gcp_step_deviation_metrics = False``); MaxText's config is
read-only, so that raises ``ValueError: Configuration is read-only`` before
training starts, and the job dies (with Google's package as with ours).
Monitoring is a side job: :func:`arm` wraps the function as soon as MaxText
imports its module (a post-import hook: nothing is imported here) so that a
failure while *starting* the monitor is one clear warning, and the job runs
with the monitor MaxText meant to build, built by our fork helper from the
same flags (it only reads the config:
:func:`goodput_integrations.maxtext.helpers.maybe_monitor_goodput`, with the
launcher's store, Prometheus port, rolling windows and ideal step time). If
that fails too, the job runs with monitoring off (goodput is still
recorded). An exception from the training inside the block propagates as
before, after the monitor's cleanup.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from typing import Any, Callable, Iterator, Optional

from goodput_integrations.maxtext import alias, helpers
from goodput_integrations.maxtext.post_import import ModulePatch

__all__ = ["MODULE", "arm", "disarm"]

logger = logging.getLogger("goodput")

MODULE = "maxtext.common.goodput"
_NAME = "maybe_monitor_goodput"


def _guarded(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(original)
    @contextlib.contextmanager
    def maybe_monitor_goodput(config: Any) -> Iterator[None]:
        manager = original(config)
        try:
            manager.__enter__()
            failed = None
        except Exception as exc:  # starting the monitor: never the job's end
            failed = f"{type(exc).__name__}: {exc}"
        if failed is not None:
            # outside the except block: the training must not run "while handling" it
            why = (" (report_performance_metric_for_gcp_monitoring=true makes MaxText write "
                   "to its read-only config)"
                   if getattr(config, "report_performance_metric_for_gcp_monitoring", False)
                   else "")
            manager = _enter_fallback(config)
            logger.warning("goodput: MaxText's goodput monitor did not start: %s%s; %s",
                           failed, why,
                           "goodput's own monitor runs instead, built from the same flags"
                           if manager is not None else
                           "the job goes on with monitoring off (goodput is still recorded)")
            if manager is None:
                yield
                return
        try:
            yield
        except BaseException:
            if not manager.__exit__(*sys.exc_info()):
                raise
        else:
            manager.__exit__(None, None, None)

    maybe_monitor_goodput.__goodput_guarded__ = True
    return maybe_monitor_goodput


class _WithLauncherSettings:
    """MaxText's config, plus the launcher's settings as our ``goodput_*`` keys."""

    def __init__(self, config: Any, settings: Any):
        self._config = config
        if settings is not None:
            self.goodput_store = settings.store
            self.goodput_prometheus_port = settings.prometheus_port
            self.goodput_rolling_windows = ",".join(map(str, settings.rolling_windows))
            self.goodput_ideal_step_time = settings.ideal_step_time
            self._goodput_clock = settings.clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def _enter_fallback(config: Any) -> Optional[Any]:
    """Our helper's monitor context for ``config``, entered; None if it fails
    (a bad flag value: logged, never the job's end)."""
    try:
        manager = helpers.maybe_monitor_goodput(
            _WithLauncherSettings(config, alias.active_session()))
        manager.__enter__()
        return manager
    except Exception:
        logger.warning("goodput: goodput's own monitor could not start either",
                       exc_info=True)
        return None


def _patch(module: Any) -> Optional[Callable[[], None]]:
    original = getattr(module, _NAME, None)
    if original is None or getattr(original, "__goodput_guarded__", False):
        return None
    setattr(module, _NAME, _guarded(original))
    return lambda: setattr(module, _NAME, original)


_PATCH = ModulePatch(MODULE, _patch)


def arm() -> None:
    """Wraps MaxText's ``maybe_monitor_goodput`` when its module is imported
    (at once if it is already); idempotent."""
    _PATCH.arm()


def disarm() -> None:
    """Cancels the hook and puts MaxText's function back."""
    _PATCH.disarm()
