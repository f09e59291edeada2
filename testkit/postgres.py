"""A throwaway PostgreSQL cluster for tests and benches: Debian's postgresql binaries,
a data folder in a temporary directory, a free port on 127.0.0.1, no system service.

PostgreSQL refuses to run as root (CI runs as root): the cluster then runs as the
`postgres` user Debian's package creates, through runuser.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from slicemeter.broker import free_port

PG_BIN_ROOT = Path("/usr/lib/postgresql")
_USER = "lake"


def pg_bin() -> Path:
    """The newest installed major version's bin folder."""
    versions = sorted((p for p in PG_BIN_ROOT.glob("*/bin") if (p / "initdb").exists()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if not versions:
        raise RuntimeError(f"no PostgreSQL server under {PG_BIN_ROOT}: apt-get install postgresql (make system-deps)")
    return versions[-1]


@dataclass
class PostgresCluster:
    root: Path
    port: int
    _as_user: list[str]

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={_USER} dbname=postgres"

    def lake(self, dbname: str | None = None) -> str:
        """A DuckLake name with its catalog in this cluster (store/lake.py)."""
        info = self.conninfo if dbname is None else self.conninfo.replace("dbname=postgres", f"dbname={dbname}")
        return f"ducklake:postgres:{info}"

    def create_database(self, name: str) -> None:
        if not name.isidentifier():
            raise ValueError(f"database name {name!r}")
        subprocess.run(self._as_user + [str(pg_bin() / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                                        "-U", _USER, name], check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(self._as_user + [str(pg_bin() / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                                        "stop"], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> PostgresCluster:
    """initdb and start a cluster in a new temporary folder (trust authentication on
    127.0.0.1 only, the socket in that folder, fsync off: a test's data need not survive a
    power cut). The folder is made by mkdtemp in the system's temporary directory, not
    under pytest's (mode 0700, closed to the postgres user)."""
    root = Path(tempfile.mkdtemp(prefix="slicemeter-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = [shutil.which("runuser") or "runuser", "-u", "postgres", "--"]
    binary = pg_bin()
    data = root / "data"
    subprocess.run(as_user + [str(binary / "initdb"), "-D", str(data), "-A", "trust", "-U", _USER, "--no-sync",
                              "-E", "UTF8"], check=True, capture_output=True)
    port = free_port()
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    done = subprocess.run(as_user + [str(binary / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "server.log"),
                                     "-o", options, "start"], capture_output=True, text=True)
    if done.returncode:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {done.stderr}{log}")
    return PostgresCluster(root=root, port=port, _as_user=as_user)
