"""Start real uvicorn server processes for tests that need real HTTP, processes and crashes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


PORT_ATTEMPTS = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening_inodes(port: int) -> set[str] | None:
    """The inodes of the sockets listening on 127.0.0.1:``port`` (or on every address), from
    /proc/net/tcp; None where there is no /proc (not Linux)."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    found = set()
    for line in lines:
        fields = line.split()
        address, at, state, inode = *fields[1].split(":"), fields[3], fields[9]
        if state == "0A" and int(at, 16) == port and address in ("0100007F", "00000000"):
            found.add(inode)
    return found


def owns_port(pid: int, port: int) -> bool:
    """Whether the socket listening on 127.0.0.1:``port`` is held by process ``pid`` (uvicorn
    binds it in the process started, with any number of workers). Linux's /proc tells; without
    /proc, yes."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return True
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    theirs = {f"socket:[{inode}]" for inode in inodes}
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd) in theirs:
                return True
    return False


def await_ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float) -> bool:
    """Wait until the server ``proc`` (its output in ``log``) answers ``/readyz`` on ``port``
    from a socket of its own: True. False if it exited because the port was taken (start it
    again on another). RuntimeError if it exited otherwise or was not ready in ``timeout``.

    A port from ``free_port`` is free only until the server binds it: another process (the
    other xdist worker's ``free_port`` and server) may take it in between; this server then
    cannot bind and exits, and before it does the other server answers on that port."""
    url = f"http://127.0.0.1:{port}/readyz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = log.read_text()
            if "address already in use" in said.lower():
                return False
            raise RuntimeError(f"server exited: {said[-2000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200 and owns_port(proc.pid, port):
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become ready")


class Server:
    """A uvicorn process group serving app.main:app."""

    def __init__(
        self,
        database_url: str,
        admin_key: str,
        workers: int = 1,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.extra_env = env or {}
        self.database_url = database_url
        self.admin_key = admin_key
        self.workers = workers
        self._chosen_port = port is None
        self._use_port(port or free_port())
        self.proc: subprocess.Popen[bytes] | None = None

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = ROOT / f".server-{self.port}.log"

    def start(self, timeout: float = 180.0) -> None:
        """Start the server and wait until it is ready (``await_ready``); one that lost the port
        ``free_port`` chose to another process is started again on another."""
        for _ in range(PORT_ATTEMPTS if self._chosen_port else 1):
            if self._start_once(timeout):
                return
            self._use_port(free_port())
        raise RuntimeError(f"the server could not bind its port ({self.port}, or one before)")

    def _start_once(self, timeout: float) -> bool:
        """Start the process: True once it is ready, False if its port was taken."""
        env = {
            **os.environ,
            "PRIVACY_LEDGER_DATABASE_URL": self.database_url,
            "PRIVACY_LEDGER_ADMIN_KEY": self.admin_key,
            **self.extra_env,
        }
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
        ]
        self._log_file = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            ready = await_ready(self.proc, self.port, self.log, timeout)
        except RuntimeError:
            self.stop()
            raise
        if not ready:
            self.stop()
        return ready

    def kill(self) -> None:
        """SIGKILL the whole process group (no clean shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if hasattr(self, "_log_file"):
            self._log_file.close()
        self.log.unlink(missing_ok=True)


@contextmanager
def running(
    database_url: str, admin_key: str, workers: int = 1, env: dict[str, str] | None = None
) -> Iterator[Server]:
    server = Server(database_url, admin_key, workers, env=env)
    server.start()
    try:
        yield server
    finally:
        server.kill()
        server.stop()
