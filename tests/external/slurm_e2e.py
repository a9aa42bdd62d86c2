"""`make test-slurm`: a real Slurm on this machine records, requeues and accounts a run.

Starts Debian's Slurm (slurmdbd on a private MariaDB, slurmctld, slurmd; munged
on its default socket), all state under build/slurm-test, every daemon as
root on loopback ports. Submits a batch job that records a run into a SQLite
store; requeues it with `scontrol requeue` during step 6 and releases it a few
seconds later; once it completed, imports `sacct --json --duplicates` with
`goodput import-scheduler slurm` and checks the report's scheduling time,
requeues and wall clock against sacct. `--record-fixture PATH` also saves the
sacct output (the CI fixture of tests/core/record/test_schedulers.py).

Needs root and the Debian packages slurm-wlm, slurmdbd, mariadb-server and
munge (the Makefile target installs them). Stops every daemon it started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "build", "slurm-test")
PY = sys.executable

JOB = r'''
import os, sys, time
from goodput_core.record.recorder import Recorder
run, store, mark = sys.argv[1], sys.argv[2], sys.argv[3]
rec = Recorder(run, store)
rec.record_job_start_time()
restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
for k in range(0 if restart == 0 else 5, 20):
    rec.record_step_start_time(k)
    time.sleep(0.3)
    if restart == 0 and k == 6:
        open(mark, "w").close()  # the driver requeues the job now
        time.sleep(60)  # killed by the requeue
rec.record_step_end_time(19)
rec.record_job_end_time()
rec.close(30)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise SystemExit(f"slurm e2e: timed out waiting for {what}")


def _run(*cmd: str, env=None, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if check and p.returncode != 0:
        raise SystemExit(f"slurm e2e: {' '.join(cmd)} failed: {p.stderr.strip()}")
    return p


class Cluster:
    """The daemons, started in order and stopped in reverse."""

    def __init__(self) -> None:
        self.procs = []
        host = socket.gethostname()
        if os.path.isdir(WORK):
            shutil.rmtree(WORK)
        for d in ("db", "state", "spool", "log"):
            os.makedirs(os.path.join(WORK, d))
        self.env = {**os.environ, "SLURM_CONF": os.path.join(WORK, "slurm.conf"),
                    "PYTHONPATH": ROOT}
        ports = {k: _free_port() for k in ("mysql", "dbd", "ctld", "d")}
        self.ports = ports
        self._write(os.path.join(WORK, "slurmdbd.conf"), f"""
AuthType=auth/munge
DbdHost=localhost
DbdPort={ports['dbd']}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports['mysql']}
StorageUser=slurm
StoragePass=goodput-test
StorageLoc=slurm_acct_db
PidFile={WORK}/slurmdbd.pid
LogFile={WORK}/log/slurmdbd.log
""")
        self._write(os.path.join(WORK, "slurm.conf"), f"""
ClusterName=goodputtest
SlurmctldHost={host}
SlurmctldPort={ports['ctld']}
SlurmdPort={ports['d']}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={WORK}/state
SlurmdSpoolDir={WORK}/spool
SlurmctldPidFile={WORK}/slurmctld.pid
SlurmdPidFile={WORK}/slurmd.pid
SlurmctldLogFile={WORK}/log/slurmctld.log
SlurmdLogFile={WORK}/log/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={ports['dbd']}
JobCompType=jobcomp/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
SchedulerType=sched/builtin
NodeName={host} CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")

    @staticmethod
    def _write(path: str, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text.lstrip())

    def _spawn(self, *cmd: str) -> None:
        log = open(os.path.join(WORK, "log", os.path.basename(cmd[0]) + ".out"), "w")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))

    def start(self) -> None:
        os.makedirs("/run/munge", exist_ok=True)
        if not os.path.exists("/run/munge/munge.socket.2"):
            self._spawn("munged", "-F", "-f", "--pid-file", f"{WORK}/munge.pid",
                        "--seed-file", f"{WORK}/munge.seed", "--key-file", "/etc/munge/munge.key")
            _wait(lambda: os.path.exists("/run/munge/munge.socket.2"), 30, "munged")
        _run("mariadb-install-db", f"--datadir={WORK}/db", "--user=root",
             "--auth-root-authentication-method=normal")
        sock = f"{WORK}/mysql.sock"
        self._spawn("mariadbd", f"--datadir={WORK}/db", "--user=root", f"--socket={sock}",
                    f"--port={self.ports['mysql']}", "--bind-address=127.0.0.1",
                    f"--pid-file={WORK}/mysql.pid")
        _wait(lambda: os.path.exists(sock), 60, "mariadbd")
        _run("mariadb", "-S", sock, "-uroot", "-e",
             "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'goodput-test';"
             "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        self._spawn("slurmdbd", "-D")
        _wait(lambda: _run("sacctmgr", "-i", "add", "cluster", "goodputtest", env=self.env,
                           check=False).returncode == 0, 60, "slurmdbd")
        self._spawn("slurmctld", "-D", "-i")
        self._spawn("slurmd", "-D")
        _wait(lambda: "idle" in _run("sinfo", "-h", "-o", "%T", env=self.env,
                                     check=False).stdout, 60, "an idle node")

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record-fixture", metavar="PATH", help="also save sacct's JSON here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("slurm e2e: run as root (the daemons run as root here)")
    cluster = Cluster()
    try:
        cluster.start()
        env = cluster.env
        store = f"sqlite:///{WORK}/goodput.sqlite"
        script = os.path.join(WORK, "job.py")
        with open(script, "w") as f:
            f.write(JOB)
        mark = os.path.join(WORK, "requeue-now")
        job = _run("sbatch", "--parsable", "--requeue", "-o", f"{WORK}/job-%j.out",
                   "--wrap", f"{PY} {script} slurm-e2e {store} {mark}", env=env).stdout.strip()
        _wait(lambda: os.path.exists(mark), 120, "step 6 of the first attempt")
        _run("scontrol", "requeue", job, env=env)
        time.sleep(3)  # a real wait for resources (Slurm would hold it 120 s)
        _run("scontrol", "update", f"JobId={job}", "StartTime=now", env=env)
        _wait(lambda: not _run("squeue", "-h", "-j", job, env=env, check=False).stdout.strip(),
              180, "the job to complete")
        text = ""

        def accounted() -> bool:
            nonlocal text
            text = _run("sacct", "--json", "--duplicates", "-j", job, env=env).stdout
            return sum(1 for j in json.loads(text)["jobs"]) >= 2 and all(
                j["state"]["current"] != "RUNNING" for j in json.loads(text)["jobs"])
        _wait(accounted, 60, "sacct to account both instances")
        if args.record_fixture:
            with open(args.record_fixture, "w") as f:
                json.dump(json.loads(text), f, indent=1, sort_keys=True)
        sacct_file = os.path.join(WORK, "sacct.json")
        with open(sacct_file, "w") as f:
            f.write(text)
        gp = [PY, "-m", "goodput_core.cli"]
        _run(*gp, "import-scheduler", "slurm", job, "--run", "slurm-e2e", "--store", store,
             "--input", sacct_file, env=env)
        rep = json.loads(_run(*gp, "report", "slurm-e2e", "--store", store, "--json",
                              env=env).stdout)
        jobs = json.loads(text)["jobs"]
        waits = sum(j["time"]["start"] - j["time"]["submission"] for j in jobs)
        lc, inc = rep["lifecycle"], rep["incidents"]
        checks = {
            "scheduling seconds = sacct's waits": abs(lc["scheduling_seconds"] - waits) < 1e-6,
            "one requeue": lc["requeues"] == 1,
            "wall from sacct's first submission":
                abs(lc["submitted"] - min(j["time"]["submission"] for j in jobs)) < 1e-6,
            "SG x RG = ETTR": abs(lc["scheduling_goodput"] * lc["runtime_goodput"]
                                  - lc["ettr"]) < 1e-9,
            "one restart": rep["disruptions"] == 1,
            "one incident, seen at the requeue": len(inc["incidents"]) == 1 and
                inc["incidents"][0]["cause"] == "requeued by the scheduler",
        }
        for name, ok in checks.items():
            print(f"{'ok ' if ok else 'FAIL'} {name}")
        print(f"scheduling {lc['scheduling_seconds']:.0f} s (sacct {waits} s), "
              f"SG {lc['scheduling_goodput']:.3f}, RG {lc['runtime_goodput']:.3f}, "
              f"ETTR {lc['ettr']:.3f}")
        return 0 if all(checks.values()) else 1
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
