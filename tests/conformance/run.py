"""Run the official MCP conformance suite: the fixture directly, through Manifold, or Manifold as a client.

    .venv/bin/python tests/conformance/run.py                     # the fixture over Streamable HTTP
    .venv/bin/python tests/conformance/run.py --through-manifold  # the fixture (stdio) behind Manifold
        [--fixture-transport streamable-http] [--session-mode per_client]
    .venv/bin/python tests/conformance/run.py --client            # client scenarios, Manifold as client
    .venv/bin/python tests/conformance/run.py --url http://127.0.0.1:8080/mcp   # a server already up

Needs ``npm ci`` in this folder first (the suite and the Node 22 it requires are pinned in
package-lock.json). Every process started here binds to 127.0.0.1, every wait is bounded, and
every process is stopped on the way out, its process group included.

Scoring follows the suite: a check is *scored* when its status is SUCCESS or FAILURE; WARNING
and INFO are reported but not scored. The exit status is 0 only when at least one scored check
ran, none failed and (with ``--min-scored N``) at least N were scored; in client mode the client
also must neither time out nor exit non-zero. 1 otherwise; 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import aiohttp
import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

__all__ = ["Check", "Report", "ScenarioResult", "main"]

HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parents[1]
NODE_BIN: Final = HERE / "node_modules" / ".bin"
NODE: Final = NODE_BIN / "node"
PACKAGE: Final = HERE / "node_modules" / "@modelcontextprotocol" / "conformance"
CLI: Final = PACKAGE / "dist" / "index.js"
FIXTURE: Final = HERE / "fixture_server.py"
CLIENT_WRAPPER: Final = HERE / "client_wrapper.py"
# The client scenarios a gateway can take part in; the auth/* ones need an OAuth client (see README).
CLIENT_SCENARIOS: Final = ("initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry")

FIXTURE_READY: Final = re.compile(r"conformance fixture listening on (http://\S+)")
# Manifold may log JSON lines (not a terminal): stop the URL at a quote, too.
MANIFOLD_READY: Final = re.compile(r"listening on (http://[^\s\"]+)")
# "✓ tools-list: 1 passed, 0 failed" in the suite's summary; it lists scenarios that crashed too.
SUMMARY_LINE: Final = re.compile(r"^[✓✗] (\S+): (\d+) passed, (\d+) failed")
RESULT_DIR: Final = re.compile(r"^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")

START_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 10.0


@dataclass(frozen=True)
class Check:
    """One check as the suite reports it."""

    scenario: str
    id: str
    name: str
    status: str
    message: str


@dataclass
class ScenarioResult:
    name: str
    passed: int = 0
    failed: int = 0
    warnings: int = 0
    problems: list[Check] = field(default_factory=list)


@dataclass
class Report:
    target: str
    suite: str
    spec_version: str
    scenarios: dict[str, ScenarioResult]
    seconds: float
    suite_exit_code: int

    @property
    def passed(self) -> int:
        return sum(s.passed for s in self.scenarios.values())

    @property
    def failed(self) -> int:
        return sum(s.failed for s in self.scenarios.values())

    @property
    def warnings(self) -> int:
        return sum(s.warnings for s in self.scenarios.values())

    @property
    def ok(self) -> bool:
        return bool(self.scenarios) and self.passed > 0 and self.failed == 0

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "suite": self.suite,
            "spec_version": self.spec_version,
            "conformance_version": conformance_version(),
            "passed": self.passed,
            "failed": self.failed,
            "scored": self.passed + self.failed,
            "warnings": self.warnings,
            "seconds": round(self.seconds, 2),
            "ok": self.ok,
            "scenarios": {
                s.name: {
                    "passed": s.passed,
                    "failed": s.failed,
                    "warnings": s.warnings,
                    "problems": [
                        {"id": c.id, "name": c.name, "status": c.status, "message": c.message}
                        for c in s.problems
                    ],
                }
                for s in self.scenarios.values()
            },
        }


class RunnerError(Exception):
    """Something around the suite failed: missing install, a process that never got ready."""


def conformance_version() -> str:
    try:
        return str(json.loads((PACKAGE / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "not installed"


def node_env() -> dict[str, str]:
    """The environment with the pinned Node 22 first on PATH (the suite needs Node >= 22)."""
    env = dict(os.environ)
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def require_install() -> None:
    """Raises: RunnerError when ``npm ci`` has not been run in this folder."""
    if not NODE.exists() or not CLI.exists():
        raise RunnerError(f"the conformance suite is not installed: run `npm ci` in {HERE}")


# -- processes -----------------------------------------------------------------------------------


@dataclass
class Started:
    process: Process
    url: str


async def _pump(
    stream: TextReceiveStream, log: TextIO, pattern: re.Pattern[str], found: list[str], ready: anyio.Event
) -> None:
    """Copy a child's stderr to its log file; set ``ready`` on the first line matching ``pattern``
    (its group 1 goes into ``found``) or when stderr closes, whichever comes first."""
    buffer = ""
    try:
        async for chunk in stream:
            log.write(chunk)
            log.flush()
            if ready.is_set():
                continue
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                match = pattern.search(line)
                if match:
                    found.append(match.group(1))
                    ready.set()
                    break
    finally:
        ready.set()


@asynccontextmanager
async def started(
    command: list[str], pattern: re.Pattern[str], log_path: Path, what: str, cwd: Path = REPO
) -> AsyncIterator[Started]:
    """Start ``command``, wait (bounded) for ``pattern`` on its stderr, stop it on exit.

    The child runs in ``cwd`` and leads a new process group, so whatever it spawned (Manifold's
    stdio servers) is stopped with it.

    Raises:
        RunnerError: the process exited, or printed no ready line within START_TIMEOUT seconds.
    """
    with log_path.open("w") as log:
        process = await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
        )
        assert process.stderr is not None
        found: list[str] = []
        ready = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump, TextReceiveStream(process.stderr), log, pattern, found, ready)
            try:
                with anyio.move_on_after(START_TIMEOUT):
                    await ready.wait()
                if not found:
                    with anyio.move_on_after(1):  # stderr closed: the exit status follows at once
                        await process.wait()
                    code = process.returncode
                    state = f"exited with {code}" if code is not None else "printed no ready line"
                    raise RunnerError(f"{what} did not get ready ({state}); see {log_path}")
                yield Started(process, found[0])
            finally:
                await _stop(process)
                # Let the pump copy the last lines, but never wait on a stray holder of the pipe.
                tg.cancel_scope.deadline = anyio.current_time() + 2


async def until_ready(url: str) -> None:
    """Wait (bounded) until the Manifold at ``url`` says on ``/readyz`` that its ``required``
    servers are up: ``manifold serve`` listens before its servers have connected.

    Raises:
        RunnerError: not ready within START_TIMEOUT seconds.
    """
    probe = url.removesuffix("/mcp") + "/readyz"
    with anyio.move_on_after(START_TIMEOUT):
        async with aiohttp.ClientSession() as http:
            while True:
                with suppress(aiohttp.ClientError):
                    async with http.get(probe) as response:
                        if response.status == 200:
                            return
                await anyio.sleep(0.1)  # a server connecting has no event we can see from here
    raise RunnerError(f"Manifold at {url} was not ready within {START_TIMEOUT:g}s (/readyz)")


async def _stop(process: Process) -> None:
    with anyio.move_on_after(STOP_TIMEOUT, shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(STOP_TIMEOUT / 2):
                await process.wait()
        # The group may still hold children (a stdio server behind Manifold).
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


def manifold_config(path: Path, fixture_url: str | None = None, session_mode: str = "shared") -> Path:
    """One server, ``conformance``: the fixture (over stdio, or at ``fixture_url``), names unprefixed.

    The fixture's tools ask the client things the handshake way only (server requests), which a
    2026-07-28 connection cannot carry; the SDK under it would still answer server/discover, so
    the era is pinned (the 0.2 line's fixture, ``tests/conformance_modern``, is dual-era).
    """
    server: dict[str, Any] = {"prefix": "", "connect_timeout": 30, "request_timeout": 60, "era": "legacy"}
    if fixture_url is None:
        server |= {"command": sys.executable, "args": [str(FIXTURE), "--transport", "stdio"]}
    else:
        server |= {"url": fixture_url, "transport": "streamable-http"}
    server["session_mode"] = session_mode
    server["required"] = True  # the runner waits on /readyz for it
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "log_level": "info",
        "servers": {"conformance": server},
    }
    path.write_text(json.dumps(config, indent=2))
    return path


def manifold_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config), "--port", "0"]


# -- the suite -----------------------------------------------------------------------------------


def suite_command(url: str, suite: str, spec_version: str, scenario: str | None, out: Path) -> list[str]:
    command = [str(NODE), str(CLI), "server", "--url", url, "-o", str(out)]
    if scenario:
        command += ["--scenario", scenario]
    else:
        command += ["--suite", suite, "--spec-version", spec_version]
    return command


def parse_checks(checks_file: Path, name: str) -> ScenarioResult:
    """One scenario's counts from the ``checks.json`` the suite wrote for it."""
    result = ScenarioResult(name)
    for raw in json.loads(checks_file.read_text()):
        status = str(raw.get("status"))
        if status == "SUCCESS":
            result.passed += 1
        elif status in ("FAILURE", "WARNING"):
            if status == "FAILURE":
                result.failed += 1
            else:
                result.warnings += 1
            message = str(raw.get("errorMessage") or raw.get("description") or "")
            result.problems.append(Check(name, str(raw.get("id")), str(raw.get("name")), status, message))
    return result


def parse_server_results(out: Path, stdout: str) -> dict[str, ScenarioResult]:
    """Per-scenario counts from the ``checks.json`` files, plus scenarios only the summary names."""
    results: dict[str, ScenarioResult] = {}
    for checks_file in sorted(out.glob("server-*/checks.json")):
        match = RESULT_DIR.match(checks_file.parent.name)
        if match:
            results[match.group(1)] = parse_checks(checks_file, match.group(1))
    order: list[str] = []
    for line in stdout.splitlines():
        match = SUMMARY_LINE.match(line.strip())
        if not match:
            continue
        name = match.group(1)
        order.append(name)
        if name not in results:
            # The scenario crashed before writing checks.json; the summary still counts it.
            results[name] = ScenarioResult(name, int(match.group(2)), int(match.group(3)))
            if results[name].failed:
                results[name].problems.append(Check(name, name, name, "FAILURE", "crashed; see suite.log"))
    # The suite's own order (it groups related scenarios), then any the summary did not name.
    return {name: results[name] for name in [*order, *sorted(set(results) - set(order))]}


async def _node(command: list[str], timeout: float, log: Path) -> tuple[int, str]:
    """Run the suite's CLI under the pinned Node; returns (exit code, stdout + stderr).

    Raises: RunnerError when it does not finish within ``timeout`` seconds.
    """
    try:
        with anyio.fail_after(timeout):
            done = await anyio.run_process(command, check=False, env=node_env(), cwd=HERE)
    except TimeoutError as exc:
        raise RunnerError(f"the suite did not finish within {timeout:.0f} s; see {log}") from exc
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    with log.open("a") as sink:
        sink.write(output)
    return done.returncode, output


async def run_server_suite(
    url: str, target: str, suite: str, spec_version: str, scenario: str | None, out: Path, timeout: float
) -> Report:
    """Raises: RunnerError when the suite does not finish within ``timeout`` seconds."""
    command = [str(NODE), str(CLI), "server", "--url", url, "-o", str(out)]
    command += ["--scenario", scenario] if scenario else ["--suite", suite, "--spec-version", spec_version]
    began = time.monotonic()
    code, output = await _node(command, timeout, out / "suite.log")
    results = parse_server_results(out, output)
    return Report(target, scenario or suite, spec_version, results, time.monotonic() - began, code)


async def run_client_scenarios(scenarios: list[str], out: Path, timeout: float) -> Report:
    """Each client scenario in turn, with Manifold (client_wrapper.py) as the client under test.

    Raises: RunnerError when one scenario does not finish within ``timeout`` seconds.
    """
    wrapper = f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENT_WRAPPER))}"
    results: dict[str, ScenarioResult] = {}
    began = time.monotonic()
    worst = 0
    for scenario in scenarios:
        where = out / "client" / scenario.replace("/", "_")
        command = [
            str(NODE),
            str(CLI),
            "client",
            "--command",
            wrapper,
            "--scenario",
            scenario,
            "-o",
            str(where),
        ]
        code, output = await _node(command, timeout, out / "suite.log")
        worst = max(worst, code)
        found = sorted(where.glob("**/checks.json"))
        result = parse_checks(found[0], scenario) if found else ScenarioResult(scenario)
        for marker in ("CLIENT TIMED OUT", "CLIENT EXITED WITH ERROR"):
            if marker in output:
                result.failed += 1
                result.problems.append(Check(scenario, "client", marker, "FAILURE", f"see {where}"))
        if not found and not result.problems:
            result.failed += 1
            result.problems.append(Check(scenario, "client", "no checks", "FAILURE", "see suite.log"))
        results[scenario] = result
    seconds = time.monotonic() - began
    return Report("Manifold as the client (client_wrapper.py)", "client", "-", results, seconds, worst)


def print_report(report: Report, out: Path, stream: TextIO, min_scored: int = 0) -> bool:
    """Print the report; returns the verdict (``report.ok`` and at least ``min_scored`` scored)."""
    width = max((len(name) for name in report.scenarios), default=10)
    kind = "client scenarios" if report.suite == "client" else f"server scenarios, suite {report.suite}"
    print(
        f"MCP conformance {conformance_version()} — {kind}, spec {report.spec_version}, "
        f"against {report.target}",
        file=stream,
    )
    for result in report.scenarios.values():
        mark = "✓" if result.failed == 0 else "✗"
        scored = result.passed + result.failed
        warn = f", {result.warnings} warnings" if result.warnings else ""
        print(f"  {mark} {result.name.ljust(width)}  {result.passed}/{scored}{warn}", file=stream)
        for problem in result.problems:
            print(f"      {problem.status} {problem.id}: {problem.message}", file=stream)
    print(
        f"scored checks: {report.passed}/{report.passed + report.failed} passed, {report.failed} failed; "
        f"{report.warnings} warnings (not scored); "
        f"{len(report.scenarios)} scenarios in {report.seconds:.1f} s",
        file=stream,
    )
    print(f"results: {out}", file=stream)
    scored = report.passed + report.failed
    if scored < min_scored:
        # A scenario that stops early scores fewer checks, and a SUCCESS can decay into an
        # unscored WARNING: pinning the count catches both.
        print(f"only {scored} checks were scored, expected at least {min_scored}", file=stream)
    verdict = report.ok and scored >= min_scored
    print("PASS" if verdict else "FAIL", file=stream)
    return verdict


async def run(args: argparse.Namespace, out: Path) -> int:
    async def against(url: str, target: str) -> Report:
        return await run_server_suite(
            url, target, args.suite, args.spec_version, args.scenario, out, args.timeout
        )

    if args.client:
        scenarios = [args.scenario] if args.scenario else list(CLIENT_SCENARIOS)
        report = await run_client_scenarios(scenarios, out, args.timeout)
    elif args.url:
        report = await against(args.url, args.url)
    elif args.through_manifold:
        async with AsyncExitStack() as stack:
            fixture_url = None
            if args.fixture_transport == "streamable-http":
                command = [sys.executable, str(FIXTURE), "--port", "0"]
                fixture = await stack.enter_async_context(
                    started(command, FIXTURE_READY, out / "fixture.log", "the fixture")
                )
                fixture_url = fixture.url
            config = manifold_config(out / "manifold.json", fixture_url, args.session_mode)
            m = await stack.enter_async_context(
                # Run from the results folder: whatever state Manifold keeps (.manifold/) lands there.
                started(manifold_command(config), MANIFOLD_READY, out / "manifold.log", "Manifold", cwd=out)
            )
            await until_ready(m.url)
            behind = f"the fixture over {args.fixture_transport}, session_mode {args.session_mode}"
            report = await against(m.url, f"Manifold at {m.url} ({behind})")
    else:
        command = [sys.executable, str(FIXTURE), "--port", "0"]
        async with started(command, FIXTURE_READY, out / "fixture.log", "the fixture") as fixture:
            report = await against(fixture.url, f"the fixture at {fixture.url}")

    passed = print_report(report, out, sys.stderr, args.min_scored)
    if args.json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the official MCP conformance suite.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--through-manifold", action="store_true", help="front the fixture with Manifold")
    where.add_argument("--url", help="test a server that is already running at this URL")
    where.add_argument(
        "--client", action="store_true", help="client scenarios, Manifold as the client (client_wrapper.py)"
    )
    parser.add_argument(
        "--fixture-transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="--through-manifold: how Manifold reaches the fixture (default: stdio)",
    )
    parser.add_argument(
        "--session-mode",
        choices=["shared", "per_client"],
        default="shared",
        help="--through-manifold: the fixture's session_mode in Manifold's config (default: shared)",
    )
    parser.add_argument("--suite", default="all", help="active | all | pending (default: all)")
    parser.add_argument("--spec-version", default="2025-11-25", help="default: 2025-11-25")
    parser.add_argument("--scenario", help="run one scenario instead of the suite")
    parser.add_argument("--output-dir", help="keep results here (default: a new temporary folder)")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds for the server suite, or per client scenario"
    )
    parser.add_argument(
        "--min-scored", type=int, default=0, help="fail unless at least this many checks were scored"
    )
    parser.add_argument("--json", action="store_true", help="also print the report as JSON on stdout")
    args = parser.parse_args(argv)
    try:
        require_install()
        out = Path(args.output_dir or tempfile.mkdtemp(prefix="manifold-conformance-")).resolve()
        out.mkdir(parents=True, exist_ok=True)
        return anyio.run(run, args, out)
    except RunnerError as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 1
    except ExceptionGroup as group:  # a RunnerError raised inside started()'s task group
        matched, rest = group.split(RunnerError)
        if matched is None or rest is not None:
            raise
        for error in _leaves(matched):
            print(f"conformance: {error}", file=sys.stderr)
        return 1


def _leaves(group: BaseExceptionGroup[RunnerError]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


if __name__ == "__main__":
    raise SystemExit(main())
