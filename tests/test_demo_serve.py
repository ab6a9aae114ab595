"""`redis-presence demo --serve`: the demo with its dashboard, as a real process.

The demo prints the dashboard's URL; the dashboard answers with the demo's consumers, on
redis-server and on the embedded server; SIGTERM, SIGKILL and a busy port leave nothing
running and print no traceback.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from test_demo import PID, Demo, alive, assert_all_gone, cli_env, run_demo_process
from webservers import ROOT, need_tool

from redis_presence.cli import cli
from redis_presence.cli.embedded import free_port

pytestmark = [pytest.mark.slow]

DASHBOARD = re.compile(r"dashboard: (http://127\.0\.0\.1:(\d+)) \(pid (\d+)\)")


def dashboard_of(output: str) -> re.Match[str]:
    found = DASHBOARD.search(output)
    assert found is not None, output
    return found


def see_the_demo(url: str) -> None:
    """The page and the API answer with the demo's consumers."""
    with httpx.Client(base_url=url, timeout=10) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "text/html" in page.headers["content-type"]
        assert "orders" in page.text
        groups = client.get("/api/v1/groups").json()
        assert groups["ttl_ms"] == 2000  # the demo's TTL, stored for the dashboard
        assert groups["ttl_source"] == "prefix"
        assert {(g["queue"], g["group"]) for g in groups["groups"]} >= {("orders", "billing")}
        assert sum(g["active"] for g in groups["groups"]) >= 1
        names = {c["consumer"] for c in client.get("/api/v1/consumers").json()["consumers"]}
        assert "broker-1-c1" in names


@pytest.mark.parametrize(
    "server",
    [pytest.param("redis-server", marks=pytest.mark.redis_server), "embedded"],
)
def test_demo_serve_prints_the_dashboard_url_and_stops_it_on_sigterm(server: str) -> None:
    if server == "embedded":
        pytest.importorskip("fakeredis")
        port = free_port()
        args = ["--server", "embedded", "--serve", "--port", str(port)]
    else:
        pytest.importorskip("binaries").need_binary("redis-server")
        port, args = 0, ["--server", "redis-server", "--serve"]
    with Demo(*args) as demo:
        found = dashboard_of(demo.printed)
        url, pid = found.group(1), int(found.group(3))
        if port:
            assert int(found.group(2)) == port
        see_the_demo(url)
        demo.send_signal(signal.SIGTERM)
        demo.wait(30)
    output, stderr = demo.output, demo.stderr
    assert demo.returncode == 0, output + stderr
    assert "Traceback" not in output + stderr
    assert f"stopped the dashboard pid {pid}\n" in output  # exit status 0: nothing added
    assert "done: every process the demo started has stopped" in output
    pids = {int(p) for p in PID.findall(output)}
    assert pid in pids
    assert_all_gone(pids)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/healthz", timeout=2)


@pytest.mark.redis_server
def test_a_sigkilled_demo_leaves_no_dashboard_behind() -> None:
    pytest.importorskip("binaries").need_binary("redis-server")
    with Demo("--serve") as demo:
        pid = int(dashboard_of(demo.printed).group(3))
        assert alive(pid)
        demo.kill()
    assert_all_gone({pid})  # the kernel's parent-death signal: SIGTERM


def test_a_busy_port_is_one_error_line_and_stops_everything() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_demo_process("--serve", "--port", str(port))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        f"Error: the demo's dashboard did not start: cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    ]
    assert "done: every process the demo started has stopped" in proc.stdout
    assert_all_gone({int(p) for p in PID.findall(proc.stdout)})


def test_port_without_serve_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["demo", "--port", "8000"])
    assert result.exit_code == 2
    assert "'--port' is the dashboard's: it needs '--serve'" in result.output


@pytest.mark.redis_server
def test_the_readme_screenshots_come_from_a_real_run(tmp_path: Path) -> None:
    """docs/screenshots.py: a demo with its dashboard, in Chromium at 1280 and 390 px."""
    chromium = need_tool("chromium", "chromium")
    script = [sys.executable, str(ROOT / "docs" / "screenshots.py"), "--out", str(tmp_path)]
    proc = subprocess.run(
        [*script, "--chromium", chromium, "--ttl-ms", "3000"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shots = {"dashboard", "dashboard-group", "dashboard-phone", "dashboard-group-phone"}
    dark = {"dashboard-dark", "dashboard-group-dark"}  # the dark scheme, desktop
    assert {p.stem for p in tmp_path.glob("*.png")} == shots | dark
    for shot in tmp_path.glob("*.png"):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 10_000
    web = (ROOT / "docs" / "web.md").read_text(encoding="utf-8")
    assert all(f"img/{name}.png" in web for name in shots | dark)
    assert "docs/img/dashboard.png" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_serve_without_the_web_extra_is_one_line_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis_presence.web.server", None)  # import fails
    result = CliRunner().invoke(cli, ["demo", "--serve", "--no-tui"])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "Error: redis-presence demo --serve needs the web extra: pip install "
        "'redis-presence[web]' (missing: redis_presence.web.server)"
    ]
