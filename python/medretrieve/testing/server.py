"""A real ``medretrieve serve`` process for tests and benchmarks: started on a free loopback port, ready when
``/readyz`` says so, stopped with SIGTERM (graceful) and, failing that, SIGKILL."""
from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence, Union

import httpx

_LISTENING = re.compile(r"Uvicorn running on (https?://[\d.]+:\d+)")


class ServerProcess:
    """``medretrieve serve COLLECTION --port 0 ARGS...`` in a child process; its log goes to a file
    (:attr:`log_path`), where the port is read from (uvicorn's "running on" line: keep ``--log-level`` at info).

    Use as a context manager (the log is removed at exit), or :meth:`start` / :meth:`stop` / :meth:`close`.
    ``startup_s``: the longest wait for the server to listen and be ready (s). ``api_key``: a key to ask for
    readiness with when the server has keys (``--api-key-file``); ``verify``: how to check an HTTPS server's
    certificate (a CA file, an SSL context, or False).
    """

    def __init__(self, collection: Union[str, "os.PathLike[str]"], args: Sequence[str] = (),
                 startup_s: float = 120.0, env: Optional[dict] = None, api_key: Optional[str] = None,
                 verify: Union[bool, str, ssl.SSLContext] = True) -> None:
        self.collection = os.fspath(collection)
        self.args = list(args)
        self.startup_s = startup_s
        self.env = {**os.environ, **(env or {})}
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # httpx takes a CA file as an SSL context (a path is deprecated there)
        self.verify = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        self.url = ""
        self.returncode: Optional[int] = None
        self._dir = tempfile.mkdtemp(prefix="medretrieve-test-server-")
        self.log_path = Path(self._dir) / "server.log"
        self.process: Optional[subprocess.Popen] = None

    @property
    def command(self) -> List[str]:
        return [sys.executable, "-m", "medretrieve", "serve", self.collection, "--host", "127.0.0.1",
                "--port", "0", *self.args]

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def start(self, wait_ready: bool = True) -> "ServerProcess":
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        give_up = time.monotonic() + self.startup_s
        while not self.url:
            found = _LISTENING.search(self.log())
            if found:
                self.url = found.group(1)
            elif self.process.poll() is not None or time.monotonic() > give_up:
                self.stop()
                raise RuntimeError(f"medretrieve serve did not start (exit {self.returncode}):\n{self.log()[-3000:]}")
            else:
                time.sleep(0.05)
        if wait_ready:
            self.wait_ready(give_up - time.monotonic())
        return self

    @property
    def workers(self) -> int:
        return int(self.args[self.args.index("--workers") + 1]) if "--workers" in self.args else 1

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until every worker serves (the ``medretrieve_ready`` gauge, summed over the workers)."""
        give_up = time.monotonic() + timeout_s
        with httpx.Client(base_url=self.url, timeout=2.0, headers=self.headers, verify=self.verify) as http:
            while True:
                try:
                    reply = http.get("/metrics")
                    if reply.status_code in (401, 403):  # waiting cannot help
                        self.stop()
                        raise RuntimeError(f"medretrieve serve asks for an API key with which to read /metrics "
                                           f"(HTTP {reply.status_code}): pass ServerProcess(..., api_key=KEY)")
                    text = reply.text
                    ready = sum(float(line.split()[1]) for line in text.splitlines()
                                if line.startswith("medretrieve_ready "))
                    if ready >= self.workers:
                        return
                except httpx.TransportError:
                    pass
                if self.process is not None and self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"medretrieve serve did not start (exit {self.returncode}):\n"
                                       f"{self.log()[-3000:]}")
                if time.monotonic() > give_up:
                    raise RuntimeError(f"medretrieve serve was not ready in {timeout_s:.0f} s:\n{self.log()[-3000:]}")
                time.sleep(0.1)

    def stop(self, timeout_s: float = 30.0) -> Optional[int]:
        """SIGTERM, wait up to ``timeout_s`` for a graceful exit, then SIGKILL; returns the exit code."""
        proc = self.process
        if proc is None:
            return self.returncode
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.returncode = proc.returncode
        self.process = None
        return self.returncode

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def close(self) -> None:
        """Stop the server and remove its log."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()
