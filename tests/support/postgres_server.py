"""A real, throwaway PostgreSQL server on loopback for the PostgreSQL store's tests.

The server binaries come from Debian's ``postgresql`` package (``make test``
and ``.ci/run`` install it when it is missing). Each server lives in its own
temporary data directory, listens on ``127.0.0.1`` on a free port and on a
Unix socket inside that directory, and requires a password (scram-sha-256)
for TCP connections, so authentication failures can be tested for real.

PostgreSQL refuses to run as root: when the tests run as root (CI), initdb
and the server run as the ``postgres`` system user via ``runuser``.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from typing import List, Optional, Tuple

__all__ = ["PostgresServer", "find_bindir", "skip_without_postgres", "USER", "PASSWORD"]

USER = "goodput"
PASSWORD = "s3cret-pw"
_START_TIMEOUT_S = 60


def find_bindir() -> Optional[str]:
    """The directory holding initdb/pg_ctl, or None when PostgreSQL is not installed."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(candidate, "initdb"), os.X_OK):
            return candidate
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def skip_without_postgres() -> None:
    """Skips the calling test (or module) when the server binaries are missing
    or ``SYSTEM_PACKAGES=0``; under CI (``.ci/run`` installs them) their absence
    is an error instead."""
    from tests.support.system_packages import require

    require("postgresql", find_bindir() is not None, "apt-get install postgresql",
            required_in_ci=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One PostgreSQL cluster in a fresh temporary directory.

    :meth:`start`, :meth:`stop`, :meth:`url`; :meth:`remove` deletes the
    directory (the server must be stopped). The directory is made with
    ``tempfile.mkdtemp`` (not pytest's ``tmp_path``, whose parents are private
    to root and so out of the ``postgres`` user's reach).

    Args:
      bindir: PostgreSQL's bin directory (default: :func:`find_bindir`).
      fsync: False (tests) trades durability for speed; benchmarks keep it on.
      max_connections: the server's limit (3 of them reserved for superusers).
      tls: ``(certificate PEM, key PEM)`` to serve TLS with (``ssl = on``).
    """

    def __init__(self, bindir: Optional[str] = None, fsync: bool = False,
                 max_connections: int = 100, tls: Optional[Tuple[bytes, bytes]] = None):
        self.bindir = bindir or find_bindir()
        if self.bindir is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.root = root = tempfile.mkdtemp(prefix="goodput-pg-")
        self.data = os.path.join(root, "data")
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0
        os.makedirs(self.data, mode=0o700, exist_ok=True)
        if self._as_postgres:
            # The server user must own its data directory and reach it.
            os.chmod(root, 0o755)
            subprocess.run(["chown", "-R", "postgres:postgres", root], check=True)
        pwfile = os.path.join(root, "pw")
        with open(pwfile, "w") as f:
            f.write(PASSWORD + "\n")
        if self._as_postgres:
            subprocess.run(["chown", "postgres:postgres", pwfile], check=True)
        self._run(["initdb", "-D", self.data, "-U", USER, "--pwfile", pwfile,
                   "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                   "--no-sync"])
        os.unlink(pwfile)
        conf = (f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{root}'\nfsync = {'on' if fsync else 'off'}\n"
                f"max_connections = {max_connections}\nshared_buffers = 32MB\n")
        if tls is not None:
            for name, pem in (("server.crt", tls[0]), ("server.key", tls[1])):
                path = os.path.join(self.data, name)
                with open(path, "wb") as f:
                    f.write(pem)
                os.chmod(path, 0o600)  # the server refuses a key others may read
                if self._as_postgres:
                    subprocess.run(["chown", "postgres:postgres", path], check=True)
            conf += "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(conf)

    @property
    def socket_dir(self) -> str:
        """The directory of the server's Unix socket (``.s.PGSQL.<port>``)."""
        return self.root

    @property
    def log_path(self) -> str:
        """The server's log file (its FATAL lines count refused connections)."""
        return os.path.join(self.root, "log")

    def _cmd(self, args: List[str]) -> List[str]:
        cmd = [os.path.join(self.bindir, args[0])] + args[1:]
        return ["runuser", "-u", "postgres", "--"] + cmd if self._as_postgres else cmd

    def _run(self, args: List[str]) -> None:
        proc = subprocess.run(self._cmd(args), capture_output=True, text=True,
                              timeout=_START_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {proc.stdout}{proc.stderr}")

    def start(self) -> None:
        """Starts the server and waits until it accepts connections."""
        self._run(["pg_ctl", "-D", self.data, "-l", self.log_path,
                   "-w", "-t", str(_START_TIMEOUT_S), "start"])

    def stop(self) -> None:
        """Stops the server (fast shutdown: open sessions are cut off)."""
        self._run(["pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"])

    def remove(self) -> None:
        """Deletes the cluster's directory."""
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres", *, password: str = PASSWORD,
            user: str = USER, query: str = "") -> str:
        """A ``postgresql://`` URL for this server (TCP on 127.0.0.1, password auth)."""
        url = f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"
        return url + (f"?{query}" if query else "")

    def create_database(self, name: str) -> None:
        """Creates an empty database ``name`` (connects as the superuser)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def create_role(self, name: str, password: str, database: str) -> None:
        """A login role that is no superuser (as writers of a real job connect),
        allowed to create the store's schema in ``database``."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
            conn.execute(f'GRANT CREATE ON DATABASE "{database}" TO "{name}"')
