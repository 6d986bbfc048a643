"""Run the official MCP conformance suite, 0.2 line, by requirement set: the fixture or Manifold.

    .venv/bin/python tests/conformance_modern/run.py                        # the fixture, 2026-07-28 set
    .venv/bin/python tests/conformance_modern/run.py --through-manifold     # the fixture behind Manifold
        [--fixture-transport streamable-http] [--fixture-era legacy] [--session-mode per_client]
    .venv/bin/python tests/conformance_modern/run.py --requirements 2025-11-25 --through-manifold
    .venv/bin/python tests/conformance_modern/run.py --url http://127.0.0.1:8080/mcp   # a server already up

Needs ``npm ci`` in this folder first (the suite and the Node 22 it requires are pinned in
package-lock.json). Every process started here binds to 127.0.0.1, every wait is bounded, and every
process is stopped on the way out, its process group included (the process helpers are the 0.1
runner's, ``tests/conformance/run.py``).

Scoring follows the suite's requirement sets (``--requirements``): the scenarios the set lists for
the server role are *required*; a check in one of them is *scored* when its status is SUCCESS or
FAILURE. What the set runs without scoring (extensions, pending scenarios) is reported apart and
never decides the verdict. Exit 0 only when at least one check was scored, none failed, every
required scenario reported checks, and (with ``--min-scored N``) at least N were scored; 1
otherwise; 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
import yaml

if __package__ in (None, ""):  # run as a script: make the repository importable (tests.conformance)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conformance.run import (
    FIXTURE_READY,
    RunnerError,
    ScenarioResult,
    parse_server_results,
    started,
    until_ready,
)

__all__ = ["Report", "Requirements", "main"]

HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parents[1]
NODE_BIN: Final = HERE / "node_modules" / ".bin"
NODE: Final = NODE_BIN / "node"
PACKAGE: Final = HERE / "node_modules" / "@modelcontextprotocol" / "conformance"
CLI: Final = PACKAGE / "dist" / "index.js"
FIXTURE_MODULE: Final = "tests.conformance_modern.fixture_server"
REVISIONS: Final = ("2026-07-28", "2025-11-25")
# Manifold's ready line, plain or inside a JSON log record (stderr is not a terminal, so JSON): the
# URL stops at whitespace or the closing quote.
MANIFOLD_READY: Final = re.compile(r"listening on (http://[^\s\"]+)")


@dataclass(frozen=True)
class Requirements:
    """What one frozen requirement set asks of a server (``requirements/<revision>.yaml``)."""

    revision: str
    required: tuple[str, ...]
    not_scored: dict[str, str]  # scenario -> why (extension, pending, added-after-release)

    @classmethod
    def load(cls, revision: str) -> Requirements:
        """Raises: RunnerError when the installed suite has no set for ``revision``."""
        path = PACKAGE / "requirements" / f"{revision}.yaml"
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise RunnerError(f"the installed suite has no requirement set {revision!r} ({path})") from exc
        extra = {
            str(e["scenario"]): str(e.get("reason", "?"))
            for e in raw.get("not_scored") or []
            if e.get("leg") == "server"
        }
        return cls(revision, tuple(str(s) for s in raw.get("server") or []), extra)


@dataclass
class Report:
    target: str
    requirements: Requirements
    scenarios: dict[str, ScenarioResult]
    seconds: float
    suite_exit_code: int

    def _sum(self, attribute: str, required: bool = True) -> int:
        names = self.required_names() if required else self.unscored_names()
        return sum(int(getattr(self.scenarios[n], attribute)) for n in names)

    def required_names(self) -> list[str]:
        return [n for n in self.scenarios if n in self.requirements.required]

    def unscored_names(self) -> list[str]:
        return [n for n in self.scenarios if n not in self.requirements.required]

    def missing(self) -> list[str]:
        """Required scenarios that reported nothing at all (not run, or crashed before a check)."""
        return [
            n
            for n in self.requirements.required
            if n not in self.scenarios or not (self.scenarios[n].passed + self.scenarios[n].failed)
        ]

    @property
    def passed(self) -> int:
        return self._sum("passed")

    @property
    def failed(self) -> int:
        return self._sum("failed")

    @property
    def warnings(self) -> int:
        return self._sum("warnings")

    @property
    def ok(self) -> bool:
        return self.passed > 0 and self.failed == 0 and not self.missing()

    def failed_ids(self) -> set[str]:
        """The ids of the scored checks that failed."""
        return {
            c.id for n in self.required_names() for c in self.scenarios[n].problems if c.status == "FAILURE"
        }

    def as_json(self) -> dict[str, Any]:
        def scenario(s: ScenarioResult) -> dict[str, Any]:
            problems = [
                {"id": c.id, "name": c.name, "status": c.status, "message": c.message} for c in s.problems
            ]
            return {"passed": s.passed, "failed": s.failed, "warnings": s.warnings, "problems": problems}

        return {
            "target": self.target,
            "requirements": self.requirements.revision,
            "conformance_version": conformance_version(),
            "passed": self.passed,
            "failed": self.failed,
            "scored": self.passed + self.failed,
            "warnings": self.warnings,
            "missing": self.missing(),
            "seconds": round(self.seconds, 2),
            "ok": self.ok,
            "scenarios": {n: scenario(self.scenarios[n]) for n in self.required_names()},
            "not_scored": {
                n: {"reason": self.requirements.not_scored.get(n, "?"), **scenario(self.scenarios[n])}
                for n in self.unscored_names()
            },
        }


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


def fixture_command(transport: str, era: str) -> list[str]:
    """The fixture as a module (it imports the 0.1 fixture): run it with the repository as cwd."""
    command = [sys.executable, "-m", FIXTURE_MODULE, "--era", era]
    return command + (["--transport", "stdio"] if transport == "stdio" else ["--port", "0"])


def manifold_config(
    path: Path, fixture_url: str | None = None, session_mode: str = "shared", era: str = "dual"
) -> Path:
    """One server, ``conformance``: the fixture (over stdio, or at ``fixture_url``), names unprefixed."""
    server: dict[str, Any] = {"prefix": "", "connect_timeout": 30, "request_timeout": 60}
    if fixture_url is None:
        command = fixture_command("stdio", era)
        server |= {"command": command[0], "args": command[1:], "cwd": str(REPO)}
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


def suite_command(url: str, revision: str, scenario: str | None, out: Path) -> list[str]:
    """A requirement set, or one scenario run at that set's wire (``--spec-version``)."""
    command = [str(NODE), str(CLI), "server", "--url", url, "-o", str(out)]
    if scenario:
        return [*command, "--scenario", scenario, "--spec-version", revision]
    return [*command, "--requirements", revision]


async def run_suite(
    url: str, target: str, requirements: Requirements, scenario: str | None, out: Path, timeout: float
) -> Report:
    """Raises: RunnerError when the suite does not finish within ``timeout`` seconds."""
    log = out / "suite.log"
    began = time.monotonic()
    try:
        with anyio.fail_after(timeout):
            done = await anyio.run_process(
                suite_command(url, requirements.revision, scenario, out),
                check=False,
                env=node_env(),
                cwd=HERE,
            )
    except TimeoutError as exc:
        raise RunnerError(f"the suite did not finish within {timeout:.0f} s; see {log}") from exc
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    with log.open("a") as sink:
        sink.write(output)
    results = parse_server_results(out, output)
    if scenario:  # one scenario: score it whatever the set says
        requirements = Requirements(requirements.revision, (scenario,), {})
    return Report(target, requirements, results, time.monotonic() - began, done.returncode)


def _print_scenarios(report: Report, names: list[str], stream: TextIO, width: int) -> None:
    for name in names:
        result = report.scenarios[name]
        mark = "✓" if result.failed == 0 and result.passed + result.failed else "✗"
        warn = f", {result.warnings} warnings" if result.warnings else ""
        print(
            f"  {mark} {name.ljust(width)}  {result.passed}/{result.passed + result.failed}{warn}",
            file=stream,
        )
        for problem in result.problems:
            print(f"      {problem.status} {problem.id}: {problem.message[:300]}", file=stream)


def print_report(
    report: Report, out: Path, stream: TextIO, min_scored: int = 0, expected: frozenset[str] = frozenset()
) -> bool:
    """Print the report; returns the verdict (``report.ok`` and at least ``min_scored`` scored).

    ``expected``: checks known to fail for a reason outside the target (named where they are
    pinned); the run fails if any other check fails, or if one of these passes (then the pin is
    stale and goes).
    """
    width = max((len(name) for name in report.scenarios), default=10)
    print(
        f"MCP conformance {conformance_version()} — server, requirements {report.requirements.revision}, "
        f"against {report.target}",
        file=stream,
    )
    _print_scenarios(report, report.required_names(), stream, width)
    for name in report.missing():
        print(f"  ✗ {name.ljust(width)}  reported no checks (not run, or crashed)", file=stream)
    unscored = report.unscored_names()
    if unscored:
        print(
            "run but not scored (extensions, pending scenarios; they never decide the verdict):", file=stream
        )
        for name in unscored:
            result = report.scenarios[name]
            why = report.requirements.not_scored.get(name, "not in the set")
            print(
                f"  · {name.ljust(width)}  {result.passed}/{result.passed + result.failed}  [{why}]",
                file=stream,
            )
    scored = report.passed + report.failed
    print(
        f"scored checks: {report.passed}/{scored} passed, {report.failed} failed; "
        f"{report.warnings} warnings (not scored); {len(report.required_names())}/"
        f"{len(report.requirements.required)} required scenarios in {report.seconds:.1f} s",
        file=stream,
    )
    print(f"results: {out}", file=stream)
    if scored < min_scored:
        # A scenario that stops early scores fewer checks: pinning the count catches it.
        print(f"only {scored} checks were scored, expected at least {min_scored}", file=stream)
    verdict = report.ok and scored >= min_scored
    if expected:
        failed = report.failed_ids()
        for check in sorted(expected - failed):
            print(f"expected {check} to fail, and it did not: drop --expect-failure {check}", file=stream)
        verdict = report.passed > 0 and not report.missing() and scored >= min_scored and failed == expected
    print("PASS" if verdict else "FAIL", file=stream)
    return verdict


async def run(args: argparse.Namespace, out: Path) -> int:
    requirements = Requirements.load(args.requirements)

    async def against(url: str, target: str) -> Report:
        return await run_suite(url, target, requirements, args.scenario, out, args.timeout)

    if args.url:
        report = await against(args.url, args.url)
    elif args.through_manifold:
        async with AsyncExitStack() as stack:
            fixture_url = None
            if args.fixture_transport == "streamable-http":
                command = fixture_command("streamable-http", args.fixture_era)
                fixture = await stack.enter_async_context(
                    started(command, FIXTURE_READY, out / "fixture.log", "the fixture", cwd=REPO)
                )
                fixture_url = fixture.url
            config = manifold_config(out / "manifold.json", fixture_url, args.session_mode, args.fixture_era)
            m = await stack.enter_async_context(
                # Run from the results folder: whatever state Manifold keeps (.manifold/) lands there.
                started(manifold_command(config), MANIFOLD_READY, out / "manifold.log", "Manifold", cwd=out)
            )
            await until_ready(m.url)
            behind = (
                f"the {args.fixture_era}-era fixture over {args.fixture_transport}, "
                f"session_mode {args.session_mode}"
            )
            report = await against(m.url, f"Manifold at {m.url} ({behind})")
    else:
        command = fixture_command("streamable-http", args.fixture_era)
        async with started(command, FIXTURE_READY, out / "fixture.log", "the fixture", cwd=REPO) as fixture:
            report = await against(fixture.url, f"the {args.fixture_era}-era fixture at {fixture.url}")

    passed = print_report(report, out, sys.stderr, args.min_scored, frozenset(args.expect_failure))
    if args.json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the official MCP conformance suite (0.2 line).")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--through-manifold", action="store_true", help="front the fixture with Manifold")
    where.add_argument("--url", help="test a server that is already running at this URL")
    parser.add_argument(
        "--requirements",
        choices=REVISIONS,
        default=REVISIONS[0],
        help="the requirement set (default: 2026-07-28)",
    )
    parser.add_argument("--scenario", help="run one scenario, at the --requirements revision's wire")
    parser.add_argument(
        "--fixture-transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="--through-manifold: how Manifold reaches the fixture (default: stdio)",
    )
    parser.add_argument(
        "--fixture-era",
        choices=["dual", "legacy"],
        default="dual",
        help="dual: the fixture serves both eras (default); legacy: the initialize handshake only",
    )
    parser.add_argument(
        "--session-mode",
        choices=["shared", "per_client"],
        default="shared",
        help="--through-manifold: the fixture's session_mode in Manifold's config (default: shared)",
    )
    parser.add_argument("--output-dir", help="keep results here (default: a new temporary folder)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole suite run")
    parser.add_argument(
        "--min-scored", type=int, default=0, help="fail unless at least this many checks were scored"
    )
    parser.add_argument(
        "--expect-failure",
        action="append",
        default=[],
        metavar="CHECK",
        help="a check id known to fail for a reason outside the target (repeatable); the run fails "
        "if it passes, or if any other check fails",
    )
    parser.add_argument("--json", action="store_true", help="also print the report as JSON on stdout")
    args = parser.parse_args(argv)
    try:
        require_install()
        out = Path(args.output_dir or tempfile.mkdtemp(prefix="manifold-conformance-modern-")).resolve()
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
