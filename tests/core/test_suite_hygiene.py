"""What the suite promises about itself (README, "make test"): no test uses
the user's default store or ``GOODPUT_*`` settings, and a hung test stops the
run visibly instead of holding CI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from goodput_core.stores import default_store_url

REPO = Path(__file__).resolve().parents[2]


def test_the_default_store_and_cache_are_private_to_the_session(tmp_path_factory):
    session_tmp = str(tmp_path_factory.getbasetemp())
    user_store = os.path.join(Path.home(), ".local", "share", "goodput")
    for url in (default_store_url(),
                # what a child process sees, with GOODPUT_STORE unset too
                subprocess.run([sys.executable, "-c", "from goodput_core.stores import "
                                "default_store_url as d; print(d())"],
                               env={k: v for k, v in os.environ.items() if k != "GOODPUT_STORE"},
                               capture_output=True, text=True, check=True,
                               timeout=60).stdout.strip()):
        assert url.startswith("sqlite:///") and user_store not in url
        assert os.path.abspath("/" + url[len("sqlite:///"):]).startswith(session_tmp)
    assert os.environ["XDG_CACHE_HOME"].startswith(session_tmp)
    # the store is private; heartbeats are off unless a test turns them on
    assert sorted(n for n in os.environ if n.startswith("GOODPUT_")) == [
        "GOODPUT_HEARTBEAT_SECONDS", "GOODPUT_STORE"]
    assert os.environ["GOODPUT_HEARTBEAT_SECONDS"] == "0"


def test_a_hung_test_stops_the_run_with_every_stack(tmp_path):
    """The suite's own pytest settings (pyproject.toml), with the per-test
    limit lowered to 1 s: the one real wait here is that limit."""
    (tmp_path / "test_hang.py").write_text(textwrap.dedent('''
        import threading

        def test_hangs():
            helper = threading.Thread(target=threading.Event().wait, name="helper-thread",
                                      daemon=True)
            helper.start()
            threading.Event().wait()

        def test_never_reached():
            pass
    '''))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "-p", "no:randomly",
         "-p", "no:cacheprovider", "-o", "timeout=1", str(tmp_path / "test_hang.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "Timeout" in out and "test_hangs" in out
    assert "helper-thread" in out  # every thread's stack, not only the test's
    assert "test_never_reached" not in out and "passed" not in out  # the run stopped there


def test_a_test_run_writes_nothing_under_the_real_home(tmp_path):
    """A pytest of its own, as a user runs it (HOME set, no XDG_* or GOODPUT_*
    variables), over tests that write stores, profiles and child processes,
    among them tests/support/home_probe.py (an environment copied at import
    time, the path by which profiles once reached ~/.local/share/goodput):
    nothing may appear under that HOME. Mutation killed: the private paths set
    by a session fixture instead of pytest_configure (the probe's child then
    writes ``.local/share/goodput/...``)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOODPUT_", "XDG_"))}
    env["HOME"] = str(home)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "tests/support/home_probe.py", "tests/core/compat/test_mldiagnostics.py",
         "tests/core/record/test_hangs.py::test_a_real_run_without_hangs_records_none"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []


_NEEDS_SYSTEM_PACKAGES = [  # one test per Debian package the suite runs for real
    "tests/core/timeline/test_overlapping_restarts.py::test_both_restarts_on_postgres",
    "tests/core/exporters/test_dashboards_prometheus.py::test_alert_rules_with_promtool",
    "tests/core/cli/test_serve_browser.py::test_runs_and_compare_pages_load_without_console_errors",
]


def test_system_packages_0_skips_their_tests_and_says_why(tmp_path):
    """README, "make test SYSTEM_PACKAGES=0": the tests that run Debian's
    postgresql, prometheus (promtool) or chromium skip with a reason that names
    the setting and the package, installed or not, and even under CI (where a
    missing package is otherwise an error)."""
    env = dict(os.environ, SYSTEM_PACKAGES="0", CI="1")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly", "-p",
         "no:cacheprovider", *_NEEDS_SYSTEM_PACKAGES],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "3 skipped" in out and "passed" not in out, out
    for what in ("postgresql", "prometheus (promtool)", "chromium and chromium-driver"):
        assert f"SYSTEM_PACKAGES=0: needs Debian's {what}, left out on request" in out, out


def test_make_test_installs_system_packages_unless_told_not_to():
    """``make test`` as root installs the missing Debian packages, and says so
    first; ``SYSTEM_PACKAGES=0`` runs no apt-get and hands the setting to
    pytest; CI keeps installing everything (.ci/run pins SYSTEM_PACKAGES=1)."""
    import shutil

    import pytest

    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def dry_run(*args):
        env = {k: v for k, v in os.environ.items() if k != "SYSTEM_PACKAGES"}
        return subprocess.run(["make", "-n", *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=60, check=True).stdout

    default = dry_run("system-packages")
    assert "apt-get install" in default and "installing Debian packages" in default
    off = dry_run("test", "SYSTEM_PACKAGES=0")
    assert "apt-get" not in off
    assert "SYSTEM_PACKAGES=0 .venv/bin/python -m pytest" in off
    assert "SYSTEM_PACKAGES=1 .venv/bin/python -m pytest" in dry_run("test")
    assert "make test SYSTEM_PACKAGES=1" in (REPO / ".ci" / "run").read_text()
