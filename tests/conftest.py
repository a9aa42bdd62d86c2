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

_LEFTOVER_CLOSE_S = 1.0  # a module's leftover recorder, closed at the module's end
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


_PRIVATE_VARS = ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME",
                 "GOODPUT_STORE")


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """No test reads or writes the user's default store, cache, profile or
    config directories (``~/.local/share/goodput``, ``~/.cache/goodput``:
    shared by every checkout on a machine, and possibly of another schema
    version), and no ``GOODPUT_*`` setting from the caller's shell reaches a
    test. This runs before any test module is imported, so an environment
    copied at import time (``CHILD_ENV = dict(os.environ, ...)``) and every
    child process get the private paths too (a session fixture came too late
    for those: profiles appeared under ``~/.local/share/goodput``)."""
    if os.getpid() != _SESSION_PID:
        return
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        base = factory.mktemp("home")
    else:  # the tmpdir plugin disabled (-p no:tmpdir): a directory of our own
        import pathlib
        import tempfile
        base = pathlib.Path(tempfile.mkdtemp(prefix="goodput-test-home-"))
    for name in [n for n in os.environ if n.startswith("GOODPUT_")]:
        del os.environ[name]
    for name in _PRIVATE_VARS[:-1]:
        os.environ[name] = str(base / name.split("_")[1].lower())
    # the same file as the XDG default: tests that unset it land there too
    store = base / "data" / "goodput" / "goodput.sqlite"
    os.environ["GOODPUT_STORE"] = "sqlite:///" + str(store).lstrip("/")
    # Heartbeats are written on the recorder's clock by the writer thread, so
    # a test that lists a run's exact events would see one more: they are off
    # unless a test turns them on (heartbeat_seconds=, or this variable in a
    # child's environment: tests/core/timeline/test_liveness*.py).
    os.environ["GOODPUT_HEARTBEAT_SECONDS"] = "0"
    config._goodput_private_home = base


@pytest.fixture(autouse=True, scope="session")
def _private_default_paths(pytestconfig):
    """The private directory the environment points at (see pytest_configure)."""
    yield getattr(pytestconfig, "_goodput_private_home", None)


@pytest.fixture(autouse=True, scope="module")
def _close_recorders_left_by_the_module():
    """Closes the recorders a test module created and left open (at the end
    of the module: a module-scoped fixture may share one between its tests).
    Each left open keeps its writer thread waking every flush interval; a
    whole suite's worth (600 threads, some every 50 ms) once starved the main
    thread of the interpreter lock for minutes."""
    import goodput_core.record.recorder as recorder_module

    before = set(map(id, recorder_module._LIVE))
    yield
    for rec in [r for r in list(recorder_module._LIVE) if id(r) not in before]:
        try:
            rec.close(_LEFTOVER_CLOSE_S)
        except Exception:  # noqa: BLE001 - a test's odd recorder: closing is best effort
            pass


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
