"""A real ``tensorboard --logdir`` subprocess on a free local port, for tests and the plugin benchmark."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Optional

__all__ = ["TensorBoardServer", "free_port", "VENV_TENSORBOARD"]

VENV_TENSORBOARD = os.path.join(os.path.dirname(sys.executable), "tensorboard")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TensorBoardServer:
    """``with TensorBoardServer(logdir) as tb: tb.url`` -> ``http://127.0.0.1:<port><prefix>``."""

    def __init__(self, logdir: str, path_prefix: str = "", binary: str = VENV_TENSORBOARD, timeout: float = 90.0,
                 extra_args=(), cwd: Optional[str] = None):
        self.logdir = str(logdir)
        self.cwd = cwd
        self.path_prefix = path_prefix.rstrip("/")
        self.binary = binary
        self.timeout = timeout
        self.extra_args = list(extra_args)
        self.port = free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.log_path = os.path.join(self.logdir if os.path.isdir(self.logdir) else "/tmp",
                                     f".tensorboard-{self.port}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path_prefix}"

    def __enter__(self) -> "TensorBoardServer":
        args = [self.binary, "--logdir", self.logdir, "--port", str(self.port), "--host", "127.0.0.1",
                "--reload_interval", "0", *self.extra_args]
        if self.path_prefix:
            args += ["--path_prefix", self.path_prefix]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=self.cwd)
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {self.proc.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/data/plugins_listing", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.__exit__(None, None, None)
        raise RuntimeError(f"tensorboard did not start within {self.timeout} s: {self.log()}")

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-3000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: only the server and its children
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)
