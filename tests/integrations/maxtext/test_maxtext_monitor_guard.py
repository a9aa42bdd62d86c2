"""Under the launcher, MaxText's ``maybe_monitor_goodput`` cannot end the job.

MaxText itself is not installed here: a test double of
``maxtext.common.goodput`` with MaxText 0.2.5's behaviour (a read-only
config; ``report_performance_metric_for_gcp_monitoring=true`` makes
``maybe_monitor_goodput`` assign to it, which raises before training) and a
train script that imports it as MaxText's ``train.py`` does are written to a
temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from goodput_integrations.maxtext import monitor_guard

FAKE_GOODPUT = textwrap.dedent('''
    """Test double of maxtext/common/goodput.py (MaxText 0.2.5)."""
    import contextlib

    EVENTS = []

    class ReadOnlyConfig:
        def __init__(self, **values):
            object.__setattr__(self, "_values", values)
        def __getattr__(self, name):
            return self._values[name]
        def __setattr__(self, name, value):
            raise ValueError("Configuration is read-only")

    @contextlib.contextmanager
    def maybe_monitor_goodput(config):
        monitor = None
        try:
            if config.report_performance_metric_for_gcp_monitoring:
                config.enable_gcp_step_deviation_metrics = False   # MaxText 0.2.5's line
            monitor = "started"
            EVENTS.append("monitor started")
            yield
        finally:
            if monitor:
                EVENTS.append("monitor stopped")
''')

TRAIN = textwrap.dedent('''
    import atexit, json, sys
    from maxtext.common.goodput import ReadOnlyConfig, maybe_monitor_goodput, EVENTS
    atexit.register(lambda: print("EVENTS " + json.dumps(EVENTS), flush=True))
    config = ReadOnlyConfig(report_performance_metric_for_gcp_monitoring=sys.argv[1] == "true")
    with maybe_monitor_goodput(config):
        # the training does not run "while handling" the monitor's exception
        assert sys.exc_info() == (None, None, None), sys.exc_info()
        EVENTS.append("trained")
        if sys.argv[2] == "crash":
            raise RuntimeError("boom in training")
''')


@pytest.fixture
def fake_maxtext(tmp_path, monkeypatch):
    root = tmp_path / "site"
    (root / "maxtext" / "common").mkdir(parents=True)
    (root / "maxtext" / "__init__.py").write_text("")
    (root / "maxtext" / "common" / "__init__.py").write_text("")
    (root / "maxtext" / "common" / "goodput.py").write_text(FAKE_GOODPUT)
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.syspath_prepend(str(root))
    yield tmp_path / "train.py"
    for name in [n for n in sys.modules if n == "maxtext" or n.startswith("maxtext.")]:
        del sys.modules[name]
    monitor_guard.disarm()


def _launch(train, store_url, *args):
    """``python -m goodput_integrations.maxtext.launch`` as users run it, in a
    process of its own (the alias must be enabled before anything imports the
    reference: this pytest process has imported it for other tests).
    Returns ``(exit code, EVENTS of the fake MaxText, stderr)``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(train.parent / "site"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    p = subprocess.run([sys.executable, "-m", "goodput_integrations.maxtext.launch",
                        f"--goodput-store={store_url}", "--goodput-no-checkpoint-stats",
                        str(train), *args], capture_output=True, text=True, timeout=120,
                       env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("EVENTS ")]
    return p.returncode, json.loads(lines[-1][7:]) if lines else None, p.stderr


def test_report_performance_metric_does_not_crash_the_job(fake_maxtext, store_url):
    code, events, err = _launch(fake_maxtext, store_url, "true", "ok")
    assert code == 0, err
    assert events == ["trained"]  # trained, monitoring off
    (line,) = [ln for ln in err.splitlines() if "monitor did not start" in ln]
    assert "Configuration is read-only" in line and "report_performance_metric" in line
    # without the launcher's guard, MaxText's own function ends the job before training
    from maxtext.common import goodput

    assert goodput.maybe_monitor_goodput.__name__ == "maybe_monitor_goodput"
    assert not getattr(goodput.maybe_monitor_goodput, "__goodput_guarded__", False)
    with pytest.raises(ValueError, match="read-only"):
        with goodput.maybe_monitor_goodput(goodput.ReadOnlyConfig(
                report_performance_metric_for_gcp_monitoring=True)):
            pass


def test_a_working_monitor_and_a_training_crash_are_untouched(fake_maxtext, store_url):
    code, events, err = _launch(fake_maxtext, store_url, "false", "ok")
    assert code == 0, err
    assert events == ["monitor started", "trained", "monitor stopped"]
    code, events, err = _launch(fake_maxtext, store_url, "false", "crash")
    assert code != 0 and "boom in training" in err
    assert events == ["monitor started", "trained", "monitor stopped"]
