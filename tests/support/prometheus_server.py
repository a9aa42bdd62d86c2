"""A real, throwaway Prometheus server (Debian's ``prometheus``) on loopback,
scraping given targets every second, and its HTTP query API (tests only)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional, Sequence


from tests.support.system_packages import require

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary_or_skip(name: str) -> str:
    path = shutil.which(name)
    require(f"prometheus ({name})", path is not None, "apt-get install prometheus")
    return path


class PrometheusServer:
    """``start()``, ``query(expr)``, ``wait_until(expr, predicate)``, ``stop()``."""

    def __init__(self, targets: Sequence[str], job: str = "goodput"):
        self.binary = binary_or_skip("prometheus")
        self.dir = tempfile.mkdtemp(prefix="goodput-prom-")
        self.port = _free_port()
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": job, "static_configs": [
                      {"targets": list(targets)}]}]}
        self.config = os.path.join(self.dir, "prometheus.yml")
        with open(self.config, "w") as f:
            json.dump(config, f)  # JSON is YAML
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60.0) -> "PrometheusServer":
        log = open(os.path.join(self.dir, "log.txt"), "wb")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait(lambda: self._ready(), timeout, "Prometheus did not become ready")
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {self.log()[-2000:]}")
        try:
            with _OPENER.open(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def log(self) -> str:
        with open(os.path.join(self.dir, "log.txt"), errors="replace") as f:
            return f.read()

    def query(self, expr: str) -> List[Dict[str, Any]]:
        """The instant vector of ``expr`` now: ``[{metric: {labels}, value: float}]``."""
        q = urllib.parse.urlencode({"query": expr})
        with _OPENER.open(f"http://127.0.0.1:{self.port}/api/v1/query?{q}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        data = body["data"]
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return [{"metric": x["metric"], "value": float(x["value"][1])} for x in data["result"]]

    @staticmethod
    def _wait(cond, timeout: float, what: str) -> Any:
        # a server in another process: polled with a deadline (not a timed assertion)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = cond()
            if got:
                return got
            time.sleep(0.1)
        raise AssertionError(what)

    def wait_until(self, expr: str, predicate, timeout: float = 60.0) -> List[Dict[str, Any]]:
        """Queries ``expr`` until ``predicate(result)`` holds (a scrape arrived)."""
        last: List[Any] = []

        def check():
            last[:] = self.query(expr)
            return predicate(last)
        self._wait(check, timeout, f"{expr}: never satisfied; last {last}")
        return last

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
        shutil.rmtree(self.dir, ignore_errors=True)
