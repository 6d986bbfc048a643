"""The pure cores do no I/O: protocol, catalog, policy, the rate-limit arithmetic and their leaves.

Pure means: no network, no clock, no processes and no files. Bytes, messages, text and an
explicit ``now`` in; messages, decisions and bytes out. The checks read the source (AST), so a
lazy import inside a function is caught as well as one at the top, and a pure module may lean
only on other pure modules: importing an I/O module would smuggle its I/O in.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "proxy"

# Network, clock, processes and concurrency: the I/O of a gateway.
FORBIDDEN = {"anyio", "asyncio", "socket", "time", "httpx", "aiohttp", "starlette", "uvicorn", "subprocess"}
# The file system: reading, writing, listing, watching.
FORBIDDEN |= {"os", "io", "tempfile", "shutil", "glob", "fcntl", "mmap", "fileinput", "watchfiles"}
# pathlib is forbidden but for its pure half: path arithmetic, never the disk.
PURE_PATHS = {"PurePath", "PurePosixPath", "PureWindowsPath"}
# Methods that touch the disk, whatever object they are called on (a Path from a parameter, say).
FILE_METHODS = {
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "open",
    "exists",
    "is_file",
    "is_dir",
    "stat",
    "lstat",
    "touch",
    "unlink",
    "mkdir",
    "rmdir",
    "iterdir",
    "rglob",
    "chmod",
    "readlink",
    "symlink_to",
    "hardlink_to",
    "samefile",
}
FILE_BUILTINS = {"open", "exec", "eval", "compile", "__import__"}

PURE_PACKAGES = ("protocol", "catalog", "policy", "guard/detect", "openapi")
PURE_MODULES = (
    "outbound/era.py",
    "outbound/lists.py",
    "outbound/relay.py",
    "core/keys.py",
    "config/overrides.py",
    "core/quotas.py",
    "config/reload_plan.py",
    # The guardrails' language and deciding (the run time around them, hooks and threads, is not).
    "guardrails/walk.py",
    "guardrails/inspector.py",
    # The leaves the cores lean on: the exception tree, the version, the document parsers.
    "core/errors.py",
    "core/identity.py",
    "core/algorithms.py",
    "core/redaction.py",
    "__init__.py",
    "core/documents.py",
    "config/openapi.py",  # the selection an OpenAPI document's operations are matched against
    "config/base.py",
)
PURE = [
    *(path for package in PURE_PACKAGES for path in sorted((ROOT / package).glob("*.py"))),
    *(ROOT / module for module in PURE_MODULES),
]


def tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported(node: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """``(module, names)`` for every import statement: ``names`` empty for ``import module``."""
    for child in ast.walk(node):
        if isinstance(child, ast.Import):
            yield from ((alias.name, []) for alias in child.names)
        elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
            yield child.module, [alias.name for alias in child.names]


def io_imports(source: str) -> list[str]:
    offenders = []
    for module, names in imported(ast.parse(source)):
        top = module.split(".")[0]
        if top == "pathlib" and names and set(names) <= PURE_PATHS:
            continue
        if top in FORBIDDEN or top == "pathlib":
            offenders.append(module)
    return offenders


def file_access(source: str) -> list[str]:
    offenders = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in FILE_BUILTINS:
            offenders.append(f"line {node.lineno}: {node.func.id}(...)")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in FILE_METHODS:
            offenders.append(f"line {node.lineno}: .{node.func.attr}(...)")
    return offenders


def module_files(module: str, names: list[str]) -> list[Path]:
    """The files of ``proxy.x.y`` (and of ``from proxy.x import submodule``)."""
    base = ROOT.joinpath(*module.split(".")[1:])
    found = [base / "__init__.py" if base.is_dir() else base.with_suffix(".py")]
    found += [base / f"{name}.py" for name in names if (base / f"{name}.py").is_file()]
    return found


def ids(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", PURE, ids=ids)
def test_pure_modules_import_no_io(path: Path) -> None:
    assert io_imports(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", PURE, ids=ids)
def test_pure_modules_touch_no_files(path: Path) -> None:
    assert file_access(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", PURE, ids=ids)
def test_pure_modules_import_only_pure_proxy_modules(path: Path) -> None:
    pure = set(PURE)
    impure = [
        module
        for module, names in imported(tree(path))
        if module.split(".")[0] == "proxy" and any(file not in pure for file in module_files(module, names))
    ]
    assert impure == []


def test_the_pure_list_is_not_empty_and_names_only_files_that_exist() -> None:
    assert len(PURE) > 25  # a moved folder must not turn these tests into no-ops
    assert all(path.is_file() for path in PURE)


@pytest.mark.parametrize(
    "source",
    [
        "import os",
        "from os import path",
        "import os.path",
        "import io",
        "import tempfile",
        "import shutil",
        "from pathlib import Path",
        "from pathlib import PurePath, Path",
        "import pathlib",
        "import anyio",
        "from time import monotonic",
    ],
)
def test_the_import_check_catches_io_modules(source: str) -> None:
    assert io_imports(source) != []


def test_the_import_check_lets_path_arithmetic_through() -> None:
    assert io_imports("from pathlib import PurePath, PurePosixPath\nimport hashlib") == []


@pytest.mark.parametrize(
    "source",
    [
        "open('pins.json').read()",
        "Path('pins.json').read_text()",
        "path.read_bytes()",
        "path.write_text('x')",
        "target.parent.mkdir(parents=True)",
        "p.exists()",
        "p.stat().st_mtime",
        "with path.open('rb') as f: pass",
    ],
)
def test_the_file_check_catches_reads_writes_and_looks(source: str) -> None:
    assert file_access(source) != []


def test_a_file_read_put_back_into_the_policy_package_is_caught() -> None:
    # What proxy/policy/loader.py did before the reading moved to proxy/config/policy_files.py.
    source = (ROOT / "policy" / "loader.py").read_text(encoding="utf-8")
    source += "\n\ndef load_policy(path):\n    return parse_policy_text(open(path).read(), path)\n"
    assert [offender.endswith("open(...)") for offender in file_access(source)] == [True]
