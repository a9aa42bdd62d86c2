"""Suite-wide pytest configuration.

With ``tests/__init__.py`` present, pytest imports this file as
``tests.conftest`` and puts the repository root on ``sys.path``, so test
modules can ``import tests.support...`` under a plain ``pytest`` run as well
as under ``python -m pytest``.
"""

import faulthandler
import os
import sys

import pytest

_LEFTOVER_FLUSH_S = 2.0  # a healthy recorder's flush after its test takes milliseconds
_EXIT_HANG_S = 120.0  # the interpreter's exit (atexit hooks, thread joins) after the run
_SESSION_PID = os.getpid()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    """A forked child that got out of its test (an exception before its
    ``os._exit``) would run the rest of the suite as a second pytest, holding
    the output open after the real run ended: it stops here, loudly."""
    if os.getpid() != _SESSION_PID:
        os.write(2, f"\nforked child {os.getpid()} left {item.nodeid} without os._exit; "
                    f"stopped\n".encode())
        os._exit(70)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """No per-test timeout covers the interpreter's exit after the last test
    (atexit flushes, joins of non-daemon threads): a hang there dumps every
    thread's stack and exits with status 1 instead of holding CI."""
    faulthandler.dump_traceback_later(_EXIT_HANG_S, exit=True, file=sys.__stderr__)


@pytest.fixture(autouse=True, scope="session")
def _private_default_paths(tmp_path_factory):
    """No test reads or writes the user's default store, cache or profile
    directory (``~/.local/share/goodput``, ``~/.cache/goodput``: shared by
    every checkout on a machine, and possibly of another schema version), and
    no ``GOODPUT_*`` setting from the caller's shell reaches a test. Child
    processes inherit the same private paths."""
    base = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("GOODPUT_")]:
            mp.delenv(name)
        mp.setenv("XDG_DATA_HOME", str(base / "data"))
        mp.setenv("XDG_CACHE_HOME", str(base / "cache"))
        # the same file as the XDG default: tests that unset it land there too
        store = base / "data" / "goodput" / "goodput.sqlite"
        mp.setenv("GOODPUT_STORE", "sqlite:///" + str(store).lstrip("/"))
        # Heartbeats are written on the recorder's clock by the writer thread,
        # so a test that lists a run's exact events would see one more: they
        # are off unless a test turns them on (heartbeat_seconds=, or this
        # variable in a child's environment: tests/core/test_liveness*.py).
        mp.setenv("GOODPUT_HEARTBEAT_SECONDS", "0")
        yield base


@pytest.fixture(autouse=True)
def _no_unflushable_recorder_left():
    """A test must not leave behind a recorder that cannot flush (a store
    that cannot be opened or written): every later ``flush_all()`` - what the
    exit hooks and many tests call - would return False, and unrelated tests
    would fail in its place (a random order once failed 11 MaxText tests so).
    Such a recorder is closed and dropped here, and the test that left it
    gets the error."""
    import goodput_core.record.recorder as recorder_module

    before = set(map(id, recorder_module._LIVE))
    yield
    stuck = [r for r in list(recorder_module._LIVE)
             if id(r) not in before and not r.flush(_LEFTOVER_FLUSH_S)]
    for rec in stuck:
        rec.close(0)
        recorder_module._LIVE.discard(rec)
    assert not stuck, (f"the test left {len(stuck)} recorder(s) that cannot flush: "
                       + "; ".join(f"{r.run}: {r.stats()}" for r in stuck))


@pytest.fixture(autouse=True)
def _release_maxtext_runtime():
    """A MaxText recorder built by any test (``create_goodput_recorder``) arms
    process-wide hooks (Orbax patch, compile listeners, SIGTERM handler,
    excepthook): removed after each test so none leaks into the next."""
    yield
    runtime = sys.modules.get("goodput_integrations.maxtext.runtime")
    if runtime is not None:
        runtime.release()
