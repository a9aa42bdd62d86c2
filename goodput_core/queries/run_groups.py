"""Run groups: runs that belong to one experiment (a sweep, an A/B test).

A run's group is the ``run_group`` key of its run metadata, so every store
keeps it and it travels with the run (export/import). Set it with::

    from goodput_core.queries.run_groups import record_run_group
    record_run_group(recorder, "slice-sweep")          # any recorder

    RunContext(recorder, run_group="slice-sweep")      # or with the run's metadata

or with ``machinelearning_run(run_group=...)`` (the ML-diagnostics
interface), the MaxText flag ``goodput_run_group`` or the AXLearn key
``--recorder_spec=run_group=...``. ``goodput runs --group G`` lists a group;
``goodput compare --group G`` puts its runs side by side (the runs of a group:
:func:`goodput_core.queries.summaries.runs_in_group`).

A run recorded into two groups (a later ``run_group`` event) belongs to the
latest one, like every metadata key.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["RUN_GROUP_KEY", "check_run_group", "group_of", "record_run_group"]

#: The run-metadata key holding a run's group.
RUN_GROUP_KEY = "run_group"
_MAX_LEN = 256


def check_run_group(group: Any, name: str = "run_group") -> str:
    """Validates a group name; returns it stripped ("" means no group).

    Raises:
      ValueError: not a string, longer than 256 characters, or with a
        control character (names are printed in tables and used as labels).
    """
    if group is None:
        return ""
    if not isinstance(group, str):
        raise ValueError(f"{name}={group!r}: expected a string")
    text = group.strip()
    if len(text) > _MAX_LEN:
        raise ValueError(f"{name}={text[:20]!r}...: longer than {_MAX_LEN} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"{name}={text!r}: control characters are not allowed")
    return text


def record_run_group(recorder: Any, group: Any) -> str:
    """Records ``group`` as the run's group (run metadata); "" or None records nothing.

    Call it at set-up: a bad name raises here, before training starts.

    Args:
      recorder: anything with ``record_metadata(**fields)``.
      group: the group name.

    Returns:
      The recorded name ("" when none).
    """
    group = check_run_group(group)
    if group:
        recorder.record_metadata(**{RUN_GROUP_KEY: group})
    return group


def group_of(calc: Any) -> Optional[str]:
    """The group of a refreshed :class:`~goodput_core.queries.calculator.Calculator`'s run, or None."""
    value = calc.metadata().get(RUN_GROUP_KEY)
    return value if isinstance(value, str) and value else None

