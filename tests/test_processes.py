"""The tests' own helpers: `waiting.wait_until` and `processes.ManagedProcess`."""

from __future__ import annotations

import asyncio
import itertools
import signal
import sys
from pathlib import Path

import pytest
from processes import ManagedProcess
from waiting import TimedOut, wait_until, wait_until_async

PY = sys.executable


def test_wait_until_returns_the_first_truthy_value() -> None:
    calls = itertools.count()
    found = wait_until(lambda: next(calls) >= 3 and "done", timeout_s=5, what="three calls")
    assert found == "done"


def test_a_timeout_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(TimedOut, match=r"after 0\.05 s waiting for the answer; last value: \[\]"):
        wait_until(list, timeout_s=0.05, what="the answer")
    with pytest.raises(TimedOut, match="last seen: 42"):
        wait_until(lambda: None, timeout_s=0.05, what="x", seen=lambda: 42)


def test_ignored_errors_count_as_not_yet_and_are_reported() -> None:
    def check() -> bool:
        raise ConnectionError("refused")

    with pytest.raises(TimedOut, match="last error: ConnectionError: refused"):
        wait_until(check, timeout_s=0.05, what="x", ignoring=(ConnectionError,))
    with pytest.raises(ConnectionError):
        wait_until(check, timeout_s=5, what="x")


def test_alive_stops_the_wait_at_once() -> None:
    def dead() -> None:
        raise AssertionError("it died")

    with pytest.raises(AssertionError, match="it died"):
        wait_until(lambda: False, timeout_s=30, what="x", alive=dead)


def test_the_async_wait_awaits_what_the_check_returns() -> None:
    calls = itertools.count()

    async def check() -> int:
        await asyncio.sleep(0)
        return next(calls)

    assert asyncio.run(wait_until_async(check, timeout_s=5, what="a non-zero count")) == 1
    assert asyncio.run(wait_until_async(lambda: 7, timeout_s=5, what="seven")) == 7
    with pytest.raises(TimedOut, match="waiting for nothing; last value: 0"):
        asyncio.run(wait_until_async(lambda: 0, timeout_s=0.05, what="nothing"))


class Echo(ManagedProcess):
    """Prints a line to each stream, then sleeps; ready once the line is out."""

    def __init__(self, log: Path | None = None, *, code: str = "") -> None:
        script = code or (
            "import sys, time; print('out line', flush=True); "
            "print('err line', file=sys.stderr, flush=True); time.sleep(60)"
        )
        super().__init__([PY, "-c", script], name="echo", log=log, separate_stderr=True)

    def ready(self) -> bool:
        return self.lines() == ["out line\n"]


def test_a_process_is_ready_logged_and_stopped(tmp_path: Path) -> None:
    with Echo(tmp_path / "echo.log") as echo:
        assert echo.is_running
        wait_until(lambda: echo.stderr, timeout_s=10, what="stderr")
        assert echo.output == "out line\n"
        assert echo.stderr == "err line\n"
    assert echo.returncode == -signal.SIGTERM
    assert (tmp_path / "echo.log").read_text() == "out line\n"
    assert (tmp_path / "echo.log.stderr").read_text() == "err line\n"
    assert echo.stop() == -signal.SIGTERM  # twice is fine


def test_a_temporary_log_outlives_the_process_in_memory() -> None:
    echo = Echo().start()
    log = echo.log
    assert log.exists()
    echo.kill()
    assert echo.returncode == -signal.SIGKILL
    echo.stop()
    assert not log.exists()
    assert echo.output == "out line\n"


def test_a_process_that_exits_fails_the_start_at_once_with_its_output() -> None:
    echo = Echo(code="import sys; print('bad config', file=sys.stderr); sys.exit(3)")
    with pytest.raises(AssertionError, match=r"echo exited with status 3:\n(.|\n)*bad config"):
        echo.start()


def test_sigkill_after_the_stop_deadline() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    stubborn += "print('out line', flush=True); time.sleep(60)"
    echo = Echo(code=stubborn).start()
    assert echo.stop(timeout_s=0.2) == -signal.SIGKILL
