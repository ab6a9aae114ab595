"""Child processes of the tests, all on one base: `ManagedProcess`.

A `ManagedProcess` runs a command (its argv, its whole environment, its working directory)
with its output in a log file (stderr in a second one with ``separate_stderr``; stdout
nowhere with ``discard_stdout``). `start` spawns it and waits, with `waiting.wait_until`,
until `ready()` says so, failing at once, with the log's tail, if the process exits. `stop`
asks it to end (`_ask_to_stop`: SIGTERM unless a subclass says otherwise), SIGKILLs it (its
whole session with ``own_session``) after `stop_timeout_s`, and reaps it. Without a `log`
path the output goes to a temporary file, kept in memory once the process is stopped.

The Redis servers are not these: the package's own launcher starts them
(`redis_presence.localserver.LocalServer`, see ``servers.py``), with the same life cycle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TypeVar

from waiting import wait_until

P = TypeVar("P", bound="ManagedProcess")


class ManagedProcess:
    """One child process of a test; see the module's docstring for its life cycle."""

    start_timeout_s: float = 30.0
    """How long `start` waits for `ready()`."""
    stop_timeout_s: float = 15.0
    """How long `stop` waits after asking before it SIGKILLs."""

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        name: str | None = None,
        log: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        separate_stderr: bool = False,
        discard_stdout: bool = False,
        stdin_pipe: bool = False,
        own_session: bool = False,
    ) -> None:
        self.argv = [os.fspath(arg) for arg in argv]
        self.name = name or Path(self.argv[0]).name
        self.env = dict(os.environ if env is None else env)
        """The child's whole environment (ours when not given)."""
        self.cwd = cwd
        self._temporary: Path | None = None
        if log is None:
            self._temporary = Path(tempfile.mkdtemp(prefix="redis-presence-test-"))
            log = self._temporary / "output.log"
        self.log = log
        """Where stdout goes, and stderr too unless ``separate_stderr``."""
        self.stderr_log = log.with_name(f"{log.name}.stderr") if separate_stderr else log
        self.discard_stdout = discard_stdout
        self.stdin_pipe = stdin_pipe
        self.own_session = own_session
        self.process: subprocess.Popen[bytes] | None = None
        self._kept: dict[Path, str] = {}

    # life cycle

    def start(self: P, timeout_s: float | None = None) -> P:
        """Spawn the process and wait until it is `ready()`; return self. A process that
        is not ready in time is stopped, and the error names it and quotes its log."""
        if self.is_running:
            raise AssertionError(f"{self.name} is already running")
        self._spawn()
        try:
            self.wait_ready(self.start_timeout_s if timeout_s is None else timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def ready(self) -> bool:
        """Whether the process is ready now (polled by `start`): at once, unless overridden."""
        return True

    def wait_ready(self, timeout_s: float) -> None:
        """Poll `ready()` until it is true; fail at once if the process exits."""
        wait_until(
            self.ready,
            timeout_s=timeout_s,
            what=f"{self.name} to be ready",
            alive=self.check_alive,
            seen=self.log_tail,
            max_interval_s=0.1,
        )

    def _spawn(self) -> None:
        self._kept.clear()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as files:
            out: IO[bytes] = files.enter_context(self.log.open("ab"))
            err = out
            if self.stderr_log != self.log:
                err = files.enter_context(self.stderr_log.open("ab"))
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if self.discard_stdout else out,
                stderr=err,
                start_new_session=self.own_session,
            )

    def _ask_to_stop(self) -> None:
        """How `stop` asks the process to end: SIGTERM, unless a subclass says otherwise."""
        self.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float | None = None) -> int | None:
        """`_ask_to_stop`, SIGKILL after `timeout_s` (default `stop_timeout_s`), reap; with
        ``own_session`` SIGKILL whatever is left of its session too. Its exit status (None
        if it was never started); safe to call twice."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            self._ask_to_stop()
            try:
                process.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_all(signal.SIGKILL)
                process.wait()
        if self.own_session:
            self._signal_all(signal.SIGKILL)  # children it left behind (a worker's pool)
        self.close_stdin()
        self._keep_output()
        return process.returncode

    def kill(self) -> None:
        """SIGKILL the main process (a crash: nothing of its own runs on the way out) and
        reap it."""
        process = self._started()
        if process.poll() is None:
            process.kill()
        process.wait()
        self.close_stdin()

    def send_signal(self, signum: int) -> None:
        """Send `signum` to the main process (if it is still running)."""
        process = self._started()
        if process.poll() is None:
            process.send_signal(signum)

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM the main process and wait for it; its exit status."""
        self.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for the main process to exit; its exit status."""
        return self._started().wait(timeout_s)

    def poll(self) -> int | None:
        """Its exit status, or None while it runs."""
        return self._started().poll()

    def close_stdin(self) -> None:
        """Close the pipe to its stdin (with ``stdin_pipe``): end of input."""
        stdin = self.process.stdin if self.process is not None else None
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.close()

    def _signal_all(self, signum: int) -> None:
        """`signum` to its whole session (``own_session``), else to the main process."""
        process = self._started()
        if self.own_session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signum)
        elif process.poll() is None:
            process.send_signal(signum)

    def _started(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise AssertionError(f"{self.name} was never started")
        return self.process

    # state

    @property
    def pid(self) -> int:
        return self._started().pid

    @property
    def returncode(self) -> int | None:
        return self._started().returncode

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        """Raise `AssertionError`, quoting the log's tail, if the process is not running."""
        code = self._started().poll()
        if code is not None:
            raise AssertionError(f"{self.name} exited with status {code}:\n{self.log_tail()}")

    # output

    @property
    def output(self) -> str:
        """What is in the log so far: stdout (unless discarded), and stderr unless separate."""
        return self._read(self.log)

    @property
    def stderr(self) -> str:
        """What the process wrote to stderr so far."""
        return self._read(self.stderr_log)

    def lines(self, *, stderr: bool = False) -> list[str]:
        """The complete lines of `output` (or of `stderr`) so far, each ending in a newline;
        once the process exited, a last line without one too."""
        *lines, rest = (self.stderr if stderr else self.output).split("\n")
        complete = [f"{line}\n" for line in lines]
        if rest and not self.is_running:
            complete.append(rest)
        return complete

    def log_tail(self, lines: int = 60) -> str:
        """The last `lines` lines of its output, both streams (for failure messages)."""
        tail = "\n".join(self.output.splitlines()[-lines:])
        if self.stderr_log != self.log:
            tail += "\n--- stderr ---\n" + "\n".join(self.stderr.splitlines()[-lines:])
        return tail or "(no output)"

    def _read(self, path: Path) -> str:
        if path in self._kept:
            return self._kept[path]
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _keep_output(self) -> None:
        """Once stopped: a temporary log is read into memory and removed."""
        if self._temporary is not None and self._temporary.exists():
            self._kept = {path: self._read(path) for path in {self.log, self.stderr_log}}
            shutil.rmtree(self._temporary, ignore_errors=True)

    # context manager

    def __enter__(self: P) -> P:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running else "not running"
        return f"<{type(self).__name__} {self.name} {state}>"
