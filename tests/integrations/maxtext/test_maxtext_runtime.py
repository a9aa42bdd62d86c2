"""What both MaxText paths add around MaxText's own calls: Orbax statistics
patched on import, disruptions from crashes and SIGTERM (and none from an
unrelated outer ``except``), and the fork module."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import types
import uuid

import pytest

from goodput_core import flush_all, open_store
from goodput_core.events import to_payload
from goodput_integrations import maxtext as mt
from goodput_integrations.maxtext import alias, fork, launch, runtime
from goodput_integrations.maxtext.post_import import when_imported

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def payloads(store_url, run):
    assert flush_all(10)
    return [to_payload(e) for e in open_store(store_url).read(run)[0]]


def causes(store_url, run):
    return [p["disruption_cause"] for p in payloads(store_url, run) if "disruption_cause" in p]


def job_ends(store_url, run):
    return sum("job_end_time" in p for p in payloads(store_url, run))


def run_python(code, tmp_path, **env):
    """Runs ``code`` in a fresh interpreter (this repository importable)."""
    script = tmp_path / f"child_{uuid.uuid4().hex[:6]}.py"
    script.write_text(textwrap.dedent(code))
    child_env = dict(os.environ, PYTHONPATH=REPO, **env)
    return subprocess.run([sys.executable, str(script)], env=child_env, capture_output=True,
                          text=True, timeout=240, stdin=subprocess.DEVNULL)


# ------------------------------------------------------------ post-import hook
def test_post_import_hook_fires_after_the_import_and_only_once(tmp_path, monkeypatch):
    name = f"late_module_{uuid.uuid4().hex[:6]}"
    (tmp_path / f"{name}.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = when_imported(name, lambda m: seen.append(m.VALUE + 1))
    assert seen == [] and name not in sys.modules  # nothing imported by the hook
    module = __import__(name)
    assert seen == [42]
    assert type(module.__loader__).__name__ == "SourceFileLoader"  # loader untouched
    assert "exec_module" not in vars(module.__loader__)
    assert hook not in sys.meta_path
    # already imported: at once
    again = []
    when_imported(name, lambda m: again.append(m.VALUE))
    assert again == [41]
    del sys.modules[name]


def test_post_import_hook_cancel_and_failing_callback(tmp_path, monkeypatch):
    names = [f"mod_{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for n in names:
        (tmp_path / f"{n}.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported(names[0], seen.append).cancel()

    def boom(module):
        raise RuntimeError("hook bug")

    when_imported(names[1], boom)
    for n in names:
        assert __import__(n).X == 1  # neither the cancelled nor the failing hook breaks it
        del sys.modules[n]
    assert seen == []


def test_alias_never_imports_orbax_and_patches_it_when_imported(tmp_path):
    pytest.importorskip("orbax.checkpoint")
    result = run_python('''
        import sys
        from goodput_integrations.maxtext import alias
        alias.enable_reference_alias(store="memory://x", checkpoint_stats=True)
        heavy = [m for m in ("orbax", "orbax.checkpoint", "jax", "numpy") if m in sys.modules]
        import orbax.checkpoint as ocp
        patched = [hasattr(c.__init__, "__wrapped__")
                   for c in (ocp.CheckpointManager, ocp.v1.training.Checkpointer)]
        alias.disable_reference_alias()
        undone = [hasattr(c.__init__, "__wrapped__")
                  for c in (ocp.CheckpointManager, ocp.v1.training.Checkpointer)]
        print(heavy, patched, undone)
    ''', tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[] [True, True] [False, False]"


def test_launcher_imports_nothing_heavy_before_the_command(tmp_path):
    pytest.importorskip("orbax.checkpoint")
    (tmp_path / "probe.py").write_text(
        "import sys\nprint(sorted(m for m in ('orbax', 'jax', 'numpy') if m in sys.modules))\n")
    result = run_python(f'''
        from goodput_integrations.maxtext import launch
        launch.main(["--goodput-store=memory://x", {str(tmp_path / "probe.py")!r}])
    ''', tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------- checkpoints, fork path
def test_fork_helpers_record_orbax_v1_save_and_restore(make_config, tmp_path, store_url):
    ocp = pytest.importorskip("orbax.checkpoint")
    import jax.numpy as jnp

    config = make_config(monitor_goodput=False)
    recorder = mt.create_goodput_recorder(config)
    directory = tmp_path / "ckpt"
    with ocp.v1.training.Checkpointer(directory) as ckptr:  # what MaxText 0.2.5 builds
        ckptr.save_pytree(3, {"w": jnp.arange(4)})
    with ocp.v1.training.Checkpointer(directory) as ckptr:
        restored = ckptr.load_pytree(3)
    assert list(restored["w"]) == [0, 1, 2, 3]
    assert recorder.flush(10)
    stats = [(p["event_type"], p["step"]) for p in payloads(store_url, config.run_name)
             if "event_type" in p]
    assert stats == [("save", 3), ("restore", 3)]


def test_checkpoint_stats_off_by_variable(make_config, monkeypatch):
    ocp = pytest.importorskip("orbax.checkpoint")
    monkeypatch.setenv("GOODPUT_CHECKPOINT_STATS", "false")
    original = ocp.CheckpointManager.__init__
    mt.create_goodput_recorder(make_config(monitor_goodput=False))
    assert runtime.orbax_patch() is None
    assert ocp.CheckpointManager.__init__ is original


# ----------------------------------------------------------- crash detection
LAUNCHED = '''
    import sys
    from ml_goodput_measurement import goodput
    rec = goodput.GoodputRecorder(sys.argv[1], "goodput_" + sys.argv[1], True)
    rec.record_job_start_time()
    if sys.argv[2] == "raise":
        raise ValueError("bad batch")
    if sys.argv[2].startswith("exit"):
        sys.exit(int(sys.argv[2][4:]))
    rec.record_job_end_time()
'''


@pytest.fixture
def launched(tmp_path, store_url, clock):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(LAUNCHED))

    def go(run, how):
        return launch.main([f"--goodput-store={store_url}", "--goodput-no-checkpoint-stats",
                            str(script), run, how], clock=clock)
    return go


@pytest.mark.usefixtures("clean_reference")
def test_launcher_records_a_crash_with_its_cause(launched, store_url):
    with pytest.raises(ValueError, match="bad batch") as info:
        launched("crashed", "raise")
    assert causes(store_url, "crashed") == ["exception:ValueError"]
    assert job_ends(store_url, "crashed") == 0
    # the excepthook (if it ran now) would skip it: recorded once
    assert getattr(info.value, "_goodput_disruption_recorded", False)


@pytest.mark.usefixtures("clean_reference")
def test_launcher_inside_an_unrelated_except_block_is_no_crash(launched, store_url):
    try:
        raise FileNotFoundError("a config file the caller handles")
    except FileNotFoundError:
        assert sys.exc_info()[0] is FileNotFoundError  # what a finally-based check sees
        assert launched("fine", "finish") == 0
    assert causes(store_url, "fine") == []
    assert job_ends(store_url, "fine") == 1


@pytest.mark.usefixtures("clean_reference")
def test_launcher_exit_status(launched, store_url):
    with pytest.raises(SystemExit):
        launched("exit0", "exit0")
    with pytest.raises(SystemExit):
        launched("exit3", "exit3")
    assert causes(store_url, "exit0") == []
    assert causes(store_url, "exit3") == ["exit:3"]


def test_job_block_inside_an_unrelated_except_block_is_no_crash(make_config, clock):
    config = make_config(monitor_goodput=False)
    recorder = mt.create_goodput_recorder(config)
    try:
        raise FileNotFoundError("handled by the caller")
    except FileNotFoundError:
        with mt.maybe_record_goodput(recorder, mt.GoodputEvent.JOB):
            clock.advance(1)
    assert causes(config.goodput_store, config.run_name) == []
    assert job_ends(config.goodput_store, config.run_name) == 1


FORKED = '''
    import os, signal, sys, types
    from goodput_integrations.maxtext.fork import *
    config = types.SimpleNamespace(run_name=sys.argv[1], enable_goodput_recording=True,
                                   monitor_goodput=False, _goodput_process_index=0)
    recorder = create_goodput_recorder(config)
    record_goodput(recorder, RECORD_JOB_START_TIME)  # as MaxText's train.py
    if sys.argv[2] == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    raise KeyError("no such layer")
'''


@pytest.mark.parametrize("how, code, cause", [
    ("sigterm", -signal.SIGTERM, "sigterm"),
    ("raise", 1, "exception:KeyError"),
])
def test_fork_process_records_sigterm_and_uncaught_exception(tmp_path, how, code, cause):
    store = f"sqlite:///{tmp_path / 'g.sqlite'}"
    result = run_python(FORKED.replace("sys.argv[1]", "'r'").replace("sys.argv[2]", repr(how)),
                        tmp_path, GOODPUT_STORE=store)
    assert result.returncode == code, result.stderr
    if how == "raise":
        assert "KeyError: 'no such layer'" in result.stderr  # the original hook still ran
    assert causes(store, "r") == [cause]
    assert job_ends(store, "r") == 0


def test_launched_process_records_sigterm(tmp_path):
    store = f"sqlite:///{tmp_path / 'g.sqlite'}"
    (tmp_path / "job.py").write_text(textwrap.dedent('''
        import os, signal
        from ml_goodput_measurement import goodput
        rec = goodput.GoodputRecorder("l", "goodput_l", True)  # hooks go in now
        rec.record_job_start_time()
        os.kill(os.getpid(), signal.SIGTERM)
    '''))
    result = run_python(f'''
        from goodput_integrations.maxtext import launch
        launch.main(["--goodput-store={store}", {str(tmp_path / "job.py")!r}])
    ''', tmp_path)
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert causes(store, "l") == ["sigterm"]


# ---------------------------------------------------------------- fork module
#: What MaxText 0.2.4-0.2.5 imports from maxtext.common.goodput (its 8 importers).
MAXTEXT_IMPORTS = ("GoodputEvent", "RECORD_JOB_END_TIME", "RECORD_JOB_START_TIME",
                   "create_goodput_recorder", "maybe_monitor_goodput", "maybe_record_goodput",
                   "record_goodput", "goodput", "get_goodput_job_name")


def test_fork_line_serves_every_name_without_the_reference(tmp_path, monkeypatch):
    package = tmp_path / "forkpkg" / "common"
    package.mkdir(parents=True)
    (tmp_path / "forkpkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "goodput.py").write_text(
        "from goodput_integrations.maxtext.fork import *  # noqa: F401,F403\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("ml_goodput_measurement")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ml_goodput_measurement", None)  # not installed
    import forkpkg.common.goodput as helper

    for name in MAXTEXT_IMPORTS:
        assert getattr(helper, name) is getattr(fork, name)
    assert helper._GOODPUT_STUB is False
    assert helper.goodput.GoodputRecorder.__module__ == "goodput_core.compat.goodput"
    config = types.SimpleNamespace(run_name="r", goodput_job_name="job-7")
    assert helper.get_goodput_job_name(config) == "job-7"


# ------------------------------------------------------- compile spans, groups
def test_compile_spans_without_taking_over_the_users_adapter(make_config, store_url):
    jax = pytest.importorskip("jax")
    from goodput_core.events import Kind
    from goodput_integrations.jax._active import ACTIVE

    config = make_config(monitor_goodput=False)
    recorder = mt.create_goodput_recorder(config)
    assert ACTIVE.current is None  # module-level wrappers do not pick ours up
    jax.jit(lambda x: x * 3 + 1)(jax.numpy.arange(3.0 + uuid.uuid4().int % 1000))
    assert recorder.flush(10)
    kinds = [e.kind for e in open_store(store_url).read(config.run_name)[0]]
    assert Kind.PROGRAM_STARTUP_START in kinds and Kind.PROGRAM_STARTUP_END in kinds


@pytest.mark.usefixtures("clean_reference")
def test_launcher_run_group_reaches_the_run(tmp_path, store_url, clock):
    from goodput_core.queries.calculator import Calculator

    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(LAUNCHED))
    assert launch.main([f"--goodput-store={store_url}", "--goodput-run-group", "sweep-7",
                        "--goodput-no-checkpoint-stats", str(script), "grouped", "finish"],
                       clock=clock) == 0
    assert flush_all(10)
    calc = Calculator("grouped", store_url, clock=clock)
    calc.refresh()
    assert calc.metadata()["run_group"] == "sweep-7"
