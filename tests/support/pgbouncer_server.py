"""A real pgbouncer in transaction pooling mode in front of a test PostgreSQL server.

From Debian's ``pgbouncer`` package (``make test`` installs it when missing).
It listens on ``127.0.0.1`` on a free port, authenticates clients with
SCRAM against its own user list (the test server's user and password), and
lends each client transaction one of at most ``pool_size`` server
connections: consecutive transactions of one client may run on different
server sessions, so anything a client leaves in a session breaks.

pgbouncer refuses to run as root: under root (CI) it runs as ``postgres``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Optional

from tests.support.postgres_server import PASSWORD, USER, PostgresServer, _free_port

__all__ = ["Pgbouncer", "find_pgbouncer", "skip_without_pgbouncer"]


def find_pgbouncer() -> Optional[str]:
    """The pgbouncer binary, or None when it is not installed."""
    for candidate in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def skip_without_pgbouncer() -> None:
    """Skips the calling test without pgbouncer or with ``SYSTEM_PACKAGES=0``;
    under CI (``make test`` installs it) its absence is an error instead."""
    from tests.support.system_packages import require

    require("pgbouncer", find_pgbouncer() is not None, "apt-get install pgbouncer",
            required_in_ci=True)


class Pgbouncer:
    """One pgbouncer process (``start``/``stop``/``url``) for ``server``.

    Args:
      server: the PostgreSQL server behind it (started or not).
      pool_size: server connections per (database, user) at most.
    """

    def __init__(self, server: PostgresServer, pool_size: int = 2):
        self.binary = find_pgbouncer()
        if self.binary is None:
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.root = tempfile.mkdtemp(prefix="goodput-pgb-")
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0
        users = os.path.join(self.root, "users.txt")
        with open(users, "w") as f:
            f.write(f'"{USER}" "{PASSWORD}"\n')
        self.ini = os.path.join(self.root, "pgbouncer.ini")
        with open(self.ini, "w") as f:
            f.write(f"""[databases]
* = host=127.0.0.1 port={server.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {users}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
server_login_retry = 1
logfile = {os.path.join(self.root, "log")}
""")
        if self._as_postgres:
            os.chmod(self.root, 0o755)
            subprocess.run(["chown", "-R", "postgres:postgres", self.root], check=True)
        self._proc: Optional[subprocess.Popen] = None

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts pgbouncer and waits until its port accepts connections."""
        cmd = [self.binary, self.ini]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:  # its start is not signalled otherwise: try the port
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        try:
            with open(os.path.join(self.root, "log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        """A URL reaching ``database`` through pgbouncer."""
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"
