"""The ``goodput`` command imports only the module of the command it runs.

Declaring every command's arguments used to import every command module
(the monitor and its exporters, the plotting, the transfers...) before any
command ran: ``goodput report`` paid for all of them at each start. Only
the named command's arguments are declared now; the help still lists every
command, and each command's own help still shows its options.
"""

from __future__ import annotations

import json
import subprocess
import sys

from goodput_core.cli import COMMANDS
from tests.support.cli_process import _env, goodput


def test_report_imports_no_other_command(tmp_path):
    store = tmp_path / "none.sqlite"
    code = ("import json, sys; from goodput_core.cli import main; "
            f"main(['report', 'r', '--store', {str(store)!r}]); "
            "print(json.dumps([m for m in sys.modules if m.startswith(("
            "'goodput_core.cli.commands.', 'goodput_core.monitor', 'goodput_core.exporters'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), cwd="/", timeout=120)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    commands = {m.rsplit(".", 1)[1] for m in loaded if m.startswith("goodput_core.cli.commands.")}
    assert "report" in commands, out.stderr
    assert not commands & {"monitor", "timeline", "serve", "demo", "import_", "export"}
    assert not [m for m in loaded if m.startswith(("goodput_core.monitor",
                                                   "goodput_core.exporters"))]


def test_help_lists_every_command_and_a_command_help_its_options():
    top = goodput("--help")
    assert top.returncode == 0
    for name in COMMANDS:
        assert name in top.stdout
    monitor = goodput("monitor", "--help")
    assert monitor.returncode == 0 and "--interval" in monitor.stdout, monitor.stderr
    bad = goodput("no-such-command")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
