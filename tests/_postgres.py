"""A throwaway PostgreSQL server for the README's multi-machine recipe: the binaries of the `pgserver` wheel
(the dev extra installs it), else a PostgreSQL install on PATH or under /usr/lib/postgresql. Its data directory
is a fresh temporary directory, removed when the server stops; it listens on 127.0.0.1 only, on a free port,
with the recipe's user, password and database (postgres / carm / carm). PostgreSQL refuses to run as root: as
root the server runs as `nobody`."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

USER, PASSWORD, DATABASE = "postgres", "carm", "carm"


class ServerUnavailable(RuntimeError):
    """No PostgreSQL binaries here, or the server did not start: the test skips with this reason."""


def bin_dir() -> Path | None:
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            candidate = Path(root) / "pginstall" / "bin"
            if (candidate / "initdb").is_file():
                return candidate
    on_path = shutil.which("initdb")
    found = [on_path] if on_path else []
    found += sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(os.path.realpath(found[0])).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as() -> dict:
    """subprocess arguments that drop root to `nobody` (PostgreSQL will not run as root)."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        raise ServerUnavailable("running as root and there is no 'nobody' user to run PostgreSQL as") from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


@contextlib.contextmanager
def postgres_server(start_timeout_s: float = 60.0):
    """Yields (host, port) of a running server with database `carm`; stops it and deletes its data on exit."""
    bins = bin_dir()
    if bins is None:
        raise ServerUnavailable("no PostgreSQL server binaries (pip install pgserver, or a PostgreSQL install)")
    as_user = _run_as()
    root = Path(tempfile.mkdtemp(prefix="carm-pg-"))
    proc = None
    try:
        data, pwfile, log_path = root / "data", root / "pw", root / "server.log"
        pwfile.write_text(PASSWORD + "\n")
        if as_user:
            os.chmod(root, 0o700)
            os.chown(root, as_user["user"], as_user["group"])
            os.chown(pwfile, as_user["user"], as_user["group"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        init = subprocess.run([str(bins / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                               "-A", "scram-sha-256", "-E", "UTF8", "--no-sync"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=120, **as_user)
        if init.returncode != 0:
            raise ServerUnavailable(f"initdb failed: {(init.stderr or init.stdout).strip()[-500:]}")
        for _attempt in range(3):
            port = _free_port()
            with open(log_path, "ab") as log:
                proc = subprocess.Popen([str(bins / "postgres"), "-D", str(data), "-p", str(port),
                                         "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={root}",
                                         "-c", "fsync=off", "-c", "logging_collector=off"],
                                        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, **as_user)
            deadline = time.monotonic() + start_timeout_s
            ready = False
            while time.monotonic() < deadline and proc.poll() is None:
                probe = subprocess.run([str(bins / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-U", USER],
                                       env=env, capture_output=True, timeout=30)
                if probe.returncode == 0:
                    ready = True
                    break
                time.sleep(0.2)
            if ready:
                break
            _stop(proc)
            proc = None
        if proc is None:
            raise ServerUnavailable(f"the PostgreSQL server did not start: {log_path.read_text()[-500:]}")
        created = subprocess.run([str(bins / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, DATABASE],
                                 env={**env, "PGPASSWORD": PASSWORD}, capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            raise ServerUnavailable(f"createdb failed: {created.stderr.strip()[-500:]}")
        yield "127.0.0.1", port
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)   # PostgreSQL's "fast" shutdown
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
