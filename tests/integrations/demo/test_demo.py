"""``goodput demo`` end to end: the real job (crash, restart, report, pictures)
and the synthetic fallback for machines without jax."""

from __future__ import annotations

import glob
import os
import stat
import subprocess
import sys
import time

import pytest

from goodput_core import cli
from goodput_core.timeline.buckets import BadputType
from goodput_core.queries.calculator import Calculator
from goodput_core.cli.demo_attempts import frameworks_missing

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

needs_frameworks = pytest.mark.skipif(
    bool(frameworks_missing()), reason="the demo job needs jax, flax, optax, orbax-checkpoint")


def _assert_png(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_MAGIC
    assert head[12:16] == b"IHDR"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width > 100 and height > 100


def _tensorboard_tags(log_dir):
    pytest.importorskip("tensorboardX")
    from tests.support.tfevents import read_scalars

    assert glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    return read_scalars(log_dir)


@pytest.mark.demo
@needs_frameworks
def test_the_real_demo_crashes_restarts_and_reports(tmp_path):
    pytest.importorskip("matplotlib")
    outdir = tmp_path / "out"
    run = "demo-under-test"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from goodput_core.cli import main; sys.exit(main())",
         "demo", "--outdir", str(outdir), "--run", run],
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # the progress bar, the crash and the restart were shown
    assert "CRASH after step 155" in out and "restored the checkpoint of step 140" in out
    assert "240/240 steps" in out
    # the report table was printed, and where everything is
    assert "Goodput:" in out and "WASTED_PROGRESS_FROM_DISRUPTION" in out
    assert "disruptions (restarts)   1" in out
    store = outdir / "goodput.sqlite"
    png = outdir / "timeline.png"
    tb = outdir / "tensorboard" / run / "goodput"
    for path in (store, png, tb):
        assert str(path) in out

    calc = Calculator(run, str(store))
    calc.refresh()
    result = calc.cumulative()
    bad = result.badput_seconds
    assert result.disruptions == 1
    assert bad[BadputType.WASTED_PROGRESS_FROM_DISRUPTION] > 0  # steps 140..155 were redone
    assert bad[BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] > 0
    assert bad[BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME] > 0
    assert bad[BadputType.PROGRAM_STARTUP] > 0
    assert bad[BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] > 0
    assert result.custom_badput_seconds.get("EVAL", 0) > 0
    assert result.max_productive_step == 239 and result.productive_seconds > 0
    total = result.productive_seconds + sum(
        v for k, v in bad.items() if k is not BadputType.DATA_LOADING_ASYNC)
    assert total == pytest.approx(result.total_seconds, rel=1e-9, abs=1e-9)

    _assert_png(png)
    scalars = _tensorboard_tags(str(tb))
    assert scalars["goodput/goodput"][-1][1] == pytest.approx(result.goodput, rel=1e-6)
    assert "badput/wasted_progress_from_disruption" in scalars
    # the checkpoints are removed at the end, the children's logs are kept
    assert not (outdir / "checkpoints" / run).exists()
    logs = outdir / "logs" / run
    assert len(list(logs.iterdir())) == 2
    # each attempt's log holds what its child printed
    assert '"event": "crash"' in (logs / "attempt-1.log").read_text()
    assert '"event": "done"' in (logs / "attempt-2.log").read_text()
    # every file the demo wrote is private, and its store is one file (the log folded in)
    written = [p for p in outdir.rglob("*") if p.is_file()]
    assert written and {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o600}
    wal = outdir / "goodput.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_synthetic_demo_uses_the_default_outdir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["demo", "--synthetic", "--run", "synth"]) == 0
    out = capsys.readouterr().out
    outdir = tmp_path / "goodput_demo_output"
    assert "Recorded the synthetic run 'synth'" in out
    assert "Goodput:" in out and "disruptions (restarts)   1" in out
    assert str(outdir / "goodput.sqlite") in out
    calc = Calculator("synth", str(outdir / "goodput.sqlite"))
    calc.refresh()
    assert calc.cumulative().disruptions == 1
    if "timeline.png" in out:
        _assert_png(outdir / "timeline.png")
    else:  # no matplotlib: the HTML variant instead
        assert (outdir / "timeline.html").exists()


def test_without_jax_the_demo_says_so_and_plays_the_synthetic_job(tmp_path, monkeypatch, capsys):
    import goodput_core.cli.demo_attempts as driver

    monkeypatch.setattr(driver, "frameworks_missing", lambda: ["jax", "flax"])
    assert cli.main(["demo", "--outdir", str(tmp_path), "--run", "fallback"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("goodput demo: jax, flax not installed")
    assert "synthetic job instead" in first
    assert "Recorded the synthetic run 'fallback'" in out


@needs_frameworks
@pytest.mark.parametrize("argv, message", [
    (["--crash-at", "500"], "--crash-at must lie in [0, 239]"),
    (["--store", "memory://demo"], "the demo trains in child processes"),
])
def test_bad_arguments_are_a_one_line_error(tmp_path, capsys, argv, message):
    assert cli.main(["demo", "--outdir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"goodput demo: error: {message}") and err.count("\n") == 1


def test_an_attempt_log_holds_what_the_child_printed(tmp_path, monkeypatch):
    """A real child process printing to stdout (protocol and other lines) and
    stderr: the parent reads the messages, the log keeps every line."""
    from goodput_core.cli import demo_attempts as driver
    from goodput_core.cli.demo_attempts import PROTOCOL_PREFIX

    script = ("import sys; print('plain stdout line'); "
              f"print({PROTOCOL_PREFIX!r} + '{{\"event\": \"step\", \"step\": 3}}'); "
              "print('to stderr', file=sys.stderr)")
    monkeypatch.setattr(driver, "child_command", lambda options: [sys.executable, "-c", script])
    log = tmp_path / "logs" / "attempt-1.log"
    att = driver.Attempt([], str(log))
    assert [m["event"] for m in att.read()] == ["step"]
    assert att.wait(30) == 0
    text = log.read_text()
    assert "plain stdout line" in text and '"step": 3' in text and "to stderr" in text


@pytest.mark.demo
@pytest.mark.timeout(600)  # two attempts that compile a model: ~40 s quiet, minutes shared
@needs_frameworks
def test_the_killed_attempt_is_reported_as_the_killed_process_said(tmp_path):
    """The demo's own crash: nothing is flushed before its SIGKILL, and the
    report of the killed attempt is what the killed process printed (the
    steps it went past its last checkpoint, and how long they took)."""
    from goodput_core.cli.demo_attempts import DemoConfig, run_crash_and_restart

    cfg = DemoConfig(store=str(tmp_path / "d.sqlite"), run="killed", workdir=str(tmp_path / "c"),
                     steps=60, save_every=10, crash_at=36, eval_every=0, sync_every=1,
                     sync_checkpoints=True, batch_size=32, features=8, hidden=16,
                     log_dir=str(tmp_path / "logs"))
    summary = run_crash_and_restart(cfg)
    killed, restarted = (a["messages"] for a in summary["attempts"])
    said = {m["step"]: m["time"] for m in killed if m["event"] == "step"}
    last = max(said)
    assert last == 36 and [m for m in killed if m["event"] == "crash"]
    restored = next(m["step"] for m in restarted if m["event"] == "restored")
    assert restored == 30

    from goodput_core.queries.incidents import incidents

    calc = Calculator("killed", cfg.store)
    calc.refresh()
    (incident,) = incidents(calc, time.time()).incidents
    # steps 30..36 were trained by the killed attempt and redone
    assert incident.lost_steps == last + 1 - restored
    # their time: step 30 started after step 29 was said, step 36 ended before it was said
    assert said[last - 1] - said[restored] <= incident.lost_seconds
    assert incident.lost_seconds <= said[last] - said[restored - 1]
