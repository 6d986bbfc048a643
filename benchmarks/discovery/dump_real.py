"""Dump the catalogs of the real-servers set: published npm and PyPI MCP servers, as served.

An authoring step, like :mod:`benchmarks.discovery.dump`; the evaluation only reads what it wrote
(``real/catalogs/<server>.json``, ``{"source": ..., "tools": [...]}``). The servers are not
dependencies of the project: install them anywhere, outside the repository, and point this at
them::

    npm install --prefix DIR @modelcontextprotocol/server-memory ...   # the packages below
    python -m venv VENV && VENV/bin/pip install mcp-server-time ...
    python -m benchmarks.discovery.dump_real --npm DIR --venv VENV
    python -m benchmarks.discovery.dump_real --set fresh --npm DIR --venv VENV   # fresh/catalogs

``mcp-server-sqlite`` (PyPI) is left out: its release fails to start with the current SDK.

Every server is started over stdio with the official SDK client and its ``tools/list`` drained.
The ones that want an API key at start-up get a placeholder (listing tools calls no API); the
Postgres one lists its tools without a live database, the Redis one wants a live Redis at start-up
(``redis-server --port 16399 --bind 127.0.0.1 --save ''`` for the time of the dump).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import anyio
from mcp import StdioServerParameters

from benchmarks.discovery.dump import listed_tools

HERE = Path(__file__).resolve().parent
PLACEHOLDER = "placeholder-not-a-key"

# server id -> (package, "npm" binary or "pypi" console script, arguments, environment)
SERVERS: dict[str, tuple[str, str, str, list[str], dict[str, str]]] = {
    "memory": ("@modelcontextprotocol/server-memory", "npm", "mcp-server-memory", [], {}),
    "thinking": (
        "@modelcontextprotocol/server-sequential-thinking",
        "npm",
        "mcp-server-sequential-thinking",
        [],
        {},
    ),
    "github": (
        "@modelcontextprotocol/server-github",
        "npm",
        "mcp-server-github",
        [],
        {"GITHUB_PERSONAL_ACCESS_TOKEN": PLACEHOLDER},
    ),
    "gitlab": (
        "@modelcontextprotocol/server-gitlab",
        "npm",
        "mcp-server-gitlab",
        [],
        {"GITLAB_PERSONAL_ACCESS_TOKEN": PLACEHOLDER},
    ),
    "slack": (
        "@modelcontextprotocol/server-slack",
        "npm",
        "mcp-server-slack",
        [],
        {"SLACK_BOT_TOKEN": PLACEHOLDER, "SLACK_TEAM_ID": PLACEHOLDER},
    ),
    "maps": (
        "@modelcontextprotocol/server-google-maps",
        "npm",
        "mcp-server-google-maps",
        [],
        {"GOOGLE_MAPS_API_KEY": PLACEHOLDER},
    ),
    "brave": (
        "@modelcontextprotocol/server-brave-search",
        "npm",
        "mcp-server-brave-search",
        [],
        {"BRAVE_API_KEY": PLACEHOLDER},
    ),
    "puppeteer": ("@modelcontextprotocol/server-puppeteer", "npm", "mcp-server-puppeteer", [], {}),
    "redis": (
        "@modelcontextprotocol/server-redis",
        "npm",
        "mcp-server-redis",
        ["redis://127.0.0.1:16399"],
        {},
    ),
    "postgres": (
        "@modelcontextprotocol/server-postgres",
        "npm",
        "mcp-server-postgres",
        ["postgresql://127.0.0.1:1/none"],
        {},
    ),
    "notion": (
        "@notionhq/notion-mcp-server",
        "npm",
        "notion-mcp-server",
        [],
        {"NOTION_TOKEN": PLACEHOLDER},
    ),
    "playwright": ("@playwright/mcp", "npm", "playwright-mcp", [], {}),
    "kubernetes": ("mcp-server-kubernetes", "npm", "mcp-server-kubernetes", [], {}),
    "context7": ("@upstash/context7-mcp", "npm", "context7-mcp", [], {}),
    "time": ("mcp-server-time", "pypi", "mcp-server-time", [], {}),
    "git": ("mcp-server-git", "pypi", "mcp-server-git", [], {}),
    "fetch": ("mcp-server-fetch", "pypi", "mcp-server-fetch", [], {}),
}

# The second held-out set's servers (``fresh/catalogs``), none of them in the sets above. Their
# packages want Node >= 20; install with ``PUPPETEER_SKIP_DOWNLOAD=1 npm install --ignore-scripts``
# (one of them pulls in a browser download no listing needs).
FRESH: dict[str, tuple[str, str, str, list[str], dict[str, str]]] = {
    "airtable": ("airtable-mcp-server", "npm", "airtable-mcp-server", [], {"AIRTABLE_API_KEY": PLACEHOLDER}),
    "chart": ("@antv/mcp-server-chart", "npm", "mcp-server-chart", [], {}),
    "circleci": (
        "@circleci/mcp-server-circleci",
        "npm",
        "mcp-server-circleci",
        [],
        {"CIRCLECI_TOKEN": PLACEHOLDER},
    ),
    "desktop": ("@wonderwhy-er/desktop-commander", "npm", "desktop-commander", [], {}),
    "firecrawl": ("firecrawl-mcp", "npm", "firecrawl-mcp", [], {"FIRECRAWL_API_KEY": PLACEHOLDER}),
    "gmaps": (
        "@cablate/mcp-google-map",
        "npm",
        "mcp-google-map",
        ["--stdio"],
        {"GOOGLE_MAPS_API_KEY": PLACEHOLDER},
    ),
    "mongodb": ("mongodb-mcp-server", "npm", "mongodb-mcp-server", [], {}),
    "tavily": ("tavily-mcp", "npm", "tavily-mcp", [], {"TAVILY_API_KEY": PLACEHOLDER}),
    "todoist": ("todoist-mcp", "npm", "todoist-mcp", [], {"API_KEY": PLACEHOLDER}),
}
SETS = {"real": SERVERS, "fresh": FRESH}


def _version(package: str, kind: str, npm: Path, venv: Path) -> str:
    if kind == "npm":
        manifest = npm / "node_modules" / package / "package.json"
        return str(json.loads(manifest.read_text())["version"])
    for meta in (venv / "lib").glob(f"python3*/site-packages/{package.replace('-', '_')}-*.dist-info"):
        return meta.name.rsplit("-", 1)[0].split("-", 1)[1].removesuffix(".dist")
    return "?"


async def dump(server_id: str, npm: Path, venv: Path, set_name: str = "real") -> None:
    package, kind, binary, args, env = SETS[set_name][server_id]
    command = npm / "node_modules" / ".bin" / binary if kind == "npm" else venv / "bin" / binary
    server = StdioServerParameters(command=str(command), args=args, env={**os.environ, **env})
    tools = await listed_tools(server)
    version = _version(package, kind, npm, venv)
    document = {"source": f"{kind} {package} {version}, tools/list as served", "tools": tools}
    out = HERE / set_name / "catalogs"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{server_id}.json").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"{server_id}: {len(tools)} tools ({package} {version})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--npm", type=Path, required=True, help="the npm prefix the servers are in")
    parser.add_argument("--venv", type=Path, required=True, help="the venv the PyPI servers are in")
    parser.add_argument("--set", choices=sorted(SETS), default="real", help="which set's servers")
    parser.add_argument("servers", nargs="*", help="server ids (default: all of the set)")
    args = parser.parse_args()
    for server_id in args.servers or SETS[args.set]:
        try:
            await dump(server_id, args.npm.resolve(), args.venv.resolve(), args.set)
        except Exception as exc:  # one server failing to start leaves the others to dump
            print(f"{server_id}: FAILED {exc!r}")


if __name__ == "__main__":
    anyio.run(main)
