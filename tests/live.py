"""Start real uvicorn server processes for tests that need real HTTP, processes and crashes."""

from __future__ import annotations

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = ROOT / f".server-{self.port}.log"

    def start(self, timeout: float = 180.0) -> None:
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become ready")

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
