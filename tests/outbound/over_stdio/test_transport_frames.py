"""StdioTransport against real child processes: lines both ways, hostile output bounded, stderr to
the log, the process's end as ServerUnavailable, and a shutdown that leaves nothing running."""

from __future__ import annotations

import logging
import os
import signal
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import anyio
import pytest

from proxy.core.errors import ServerUnavailable
from proxy.outbound.over_stdio.transport import StdioTransport
from proxy.outbound.transport import Failed, Link
from proxy.protocol.jsonrpc import Message


async def answered(link: Link) -> Message:
    """The next message the server wrote (a transport reports no failures on a healthy stdio link)."""
    message, _ = await link.receive()
    assert not isinstance(message, Failed), message
    return message


pytestmark = pytest.mark.anyio

LOGGER = "proxy.outbound.over_stdio.transport"

# What a server's own stdin/stdout look like to these scripts: bytes, one JSON message a line.
PRELUDE = """\
import json, os, signal, subprocess, sys
def send(message):
    sys.stdout.buffer.write(json.dumps(message, ensure_ascii=False).encode() + b"\\n")
    sys.stdout.buffer.flush()
"""

ECHO = """\
while line := sys.stdin.buffer.readline():
    message = json.loads(line)
    if message.get("method") == "notify_me":
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "first"}})
    if message.get("method") == "exit":
        sys.exit(message["params"]["code"])
    if "id" in message:
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"got": message}})
"""

WAIT_FOR_EOF = "sys.stdin.buffer.read()\n"
WAIT_FOREVER = "while True:\n    signal.pause()\n"


def script(*parts: str) -> StdioTransport:
    return server(PRELUDE + "".join(textwrap.dedent(part) for part in parts))


def server(
    source: str, *, env: Mapping[str, str] | None = None, cwd: str | None = None, shutdown_grace: float = 2.0
) -> StdioTransport:
    """Server ``fx``: this Python interpreter running ``source``."""
    return StdioTransport(
        "fx", sys.executable, ["-c", source], env=env, cwd=cwd, shutdown_grace=shutdown_grace
    )


class LogLines(logging.Handler):
    """The transport's log lines, and a way to wait for one without sleeping."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._grew = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self._grew.set()
        self._grew = anyio.Event()

    async def until(self, line: str) -> None:
        while line not in self.lines:
            await self._grew.wait()


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[LogLines]:
    caplog.set_level(logging.INFO, logger=LOGGER)
    lines = LogLines()
    logging.getLogger(LOGGER).addHandler(lines)
    try:
        yield lines
    finally:
        logging.getLogger(LOGGER).removeHandler(lines)


def reaped(pid: int) -> bool:
    """True when ``pid`` is no child of ours any more: it ended and was waited for (no zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


async def until_exited(pidfd: int) -> None:
    """Wait for the process behind ``pidfd`` (any process, not only our child) to end."""
    await anyio.wait_readable(pidfd)


# ---- messages ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_messages_go_both_ways_one_line_each_and_no_request_is_named_as_their_carrier() -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "grüße"}}
    asking = {"jsonrpc": "2.0", "id": "two", "method": "notify_me"}

    with anyio.fail_after(10):
        async with script(ECHO).connect() as link:
            await link.send(request)
            first = await link.receive()
            await link.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await link.send(asking)
            second = await link.receive()
            third = await link.receive()

    assert first == ({"jsonrpc": "2.0", "id": 1, "result": {"got": request}}, None)
    assert second == (
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "first"}},
        None,
    )
    assert third == ({"jsonrpc": "2.0", "id": "two", "result": {"got": asking}}, None)


@pytest.mark.slow
async def test_a_line_that_is_not_json_rpc_is_dropped_and_the_messages_around_it_arrive(
    log: LogLines,
) -> None:
    lines = b'{"jsonrpc":"2.0","method":"a"}\nnot json\n[1]\n{"jsonrpc":"2.0","method":"b"}\n'
    burst = f"sys.stdout.buffer.write({lines!r})\n"  # one write: the four lines arrive together

    with anyio.fail_after(10):
        async with script(burst, "sys.stdout.flush()\n", WAIT_FOR_EOF).connect() as link:
            first, _ = await link.receive()
            second, _ = await link.receive()

    assert (first, second) == ({"jsonrpc": "2.0", "method": "a"}, {"jsonrpc": "2.0", "method": "b"})
    dropped = [line for line in log.lines if "dropped a line from stdout that is not JSON-RPC" in line]
    assert len(dropped) == 2
    assert all(
        line.startswith("server fx: dropped a line from stdout that is not JSON-RPC: ") for line in dropped
    )


@pytest.mark.slow
async def test_a_line_over_the_limit_with_no_id_to_read_fails_every_request_and_the_next_message_arrives(
    log: LogLines,
) -> None:
    # 17 MiB without a newline: past the 16 MiB a line may grow to, whatever the read sizes.
    overlong = """\
    send({"jsonrpc": "2.0", "method": "before"})
    sys.stdout.buffer.write(b"x" * (17 * 1024 * 1024) + b"\\n")
    send({"jsonrpc": "2.0", "method": "after"})
    """

    with anyio.fail_after(30):
        async with script(overlong, WAIT_FOR_EOF).connect() as link:
            before, _ = await link.receive()
            refused, _ = await link.receive()
            after, _ = await link.receive()

    assert (before, after) == ({"jsonrpc": "2.0", "method": "before"}, {"jsonrpc": "2.0", "method": "after"})
    assert isinstance(refused, Failed)
    assert refused.request_id is None  # every request in flight: any of them may have been it
    assert str(refused.error) == (
        "server 'fx' broke the protocol: it wrote a message too large to tell which request it answered:"
        " a message line exceeded 16777216 bytes (limits.max_server_message_bytes)"
    )


@pytest.mark.parametrize(
    ("answer", "request_id"),
    [
        # The Python SDK writes the id first, the TypeScript SDK last.
        (b'{"jsonrpc":"2.0","id":7,"result":{"text":"%s"}}', 7),
        (b'{"result":{"text":"%s"},"jsonrpc":"2.0","id":"seven"}', "seven"),
    ],
)
@pytest.mark.slow
async def test_an_answer_over_the_limit_fails_the_request_it_was_for_read_from_either_end(
    answer: bytes, request_id: int | str
) -> None:
    write = f"sys.stdout.buffer.write({answer!r}.replace(b'%s', b'x' * 1024 * 1024) + b'\\n')\n"
    source = PRELUDE + write + "sys.stdout.flush()\n" + WAIT_FOR_EOF
    transport = StdioTransport("fx", sys.executable, ["-c", source], max_line=64 * 1024)

    with anyio.fail_after(10):
        async with transport.connect() as link:
            refused, _ = await link.receive()

    assert isinstance(refused, Failed)
    assert refused.request_id == request_id
    assert str(refused.error) == (
        "server 'fx' broke the protocol: its answer was too large: a message line exceeded 65536 bytes"
        " (limits.max_server_message_bytes)"
    )


@pytest.mark.slow
async def test_an_answer_that_is_not_utf8_fails_the_request_it_was_for() -> None:
    garbled = b'{"jsonrpc":"2.0","id":3,"result":{"text":"\xff\xfe"}}\n'
    source = PRELUDE + f"sys.stdout.buffer.write({garbled!r})\nsys.stdout.flush()\n" + WAIT_FOR_EOF

    with anyio.fail_after(10):
        async with server(source).connect() as link:
            refused, _ = await link.receive()

    assert isinstance(refused, Failed)
    assert refused.request_id == 3
    assert str(refused.error).startswith("server 'fx' broke the protocol: its answer was not JSON: ")


@pytest.mark.slow
async def test_each_stderr_line_is_logged_tagged_with_the_server_and_cut_to_a_kib(log: LogLines) -> None:
    chatter = """\
    sys.stderr.buffer.write(b"starting up\\nbad \\xff byte\\n" + b"e" * 200000 + b"\\nready\\n")
    sys.stderr.buffer.flush()
    """

    with anyio.fail_after(10):
        async with script(chatter, WAIT_FOR_EOF).connect():
            await log.until("server fx: stderr: ready")

    stderr = [line for line in log.lines if line.startswith("server fx: stderr: ")]
    assert stderr[:2] == ["server fx: stderr: starting up", "server fx: stderr: bad \ufffd byte"]
    assert "server fx: stderr: " + "e" * 1024 + "…" in stderr  # cut to its first KiB
    assert stderr[-1] == "server fx: stderr: ready"
    assert max(map(len, stderr)) < 200000  # the overlong line is never logged whole


# ---- the process ending --------------------------------------------------------------------------


@pytest.mark.slow
async def test_when_the_process_exits_receive_and_send_raise_server_unavailable_with_the_exit_code() -> None:
    with anyio.fail_after(10):
        async with script(ECHO).connect() as link:
            await link.send({"jsonrpc": "2.0", "method": "exit", "params": {"code": 3}})
            with pytest.raises(ServerUnavailable) as received:
                await link.receive()
            with pytest.raises(ServerUnavailable) as sent:
                await link.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})

    assert (received.value.server_id, received.value.reason) == ("fx", "the process exited with code 3")
    assert str(received.value) == "server 'fx' is unavailable: the process exited with code 3"
    assert sent.value.reason == "the process exited with code 3"


@pytest.mark.slow
async def test_a_process_killed_by_a_signal_is_reported_with_the_signal() -> None:
    with anyio.fail_after(10):
        async with script("os.kill(os.getpid(), signal.SIGKILL)\n").connect() as link:
            with pytest.raises(ServerUnavailable) as received:
                await link.receive()

    assert received.value.reason == "the process exited with code -9"


@pytest.mark.slow
async def test_a_process_that_closes_its_stdout_but_runs_on_is_reported_as_such() -> None:
    with anyio.fail_after(10):
        async with script("os.close(1)\n", WAIT_FOR_EOF).connect() as link:
            with pytest.raises(ServerUnavailable) as received:
                await link.receive()

    assert received.value.reason == "the process closed its stdout"


@pytest.mark.slow
async def test_a_command_that_cannot_start_raises_server_unavailable_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")

    with anyio.fail_after(10), pytest.raises(ServerUnavailable) as raised:
        async with StdioTransport("fx", missing).connect():
            pass

    assert raised.value.reason == f"cannot start {missing!r}: No such file or directory"


# ---- what the process is started with --------------------------------------------------------


@pytest.mark.slow
async def test_the_process_gets_the_configured_env_and_cwd_and_none_of_our_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MANIFOLD_TEST_SECRET", "ours, not the server's")
    monkeypatch.setenv("HOME", str(tmp_path))
    inherited = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")
    expected = {name: os.environ[name] for name in inherited if name in os.environ}
    expected |= {"API_TOKEN": "s3cret", "PATH": "/opt/server/bin"}
    report = (
        'send({"jsonrpc": "2.0", "method": "seen", "params": {"env": {**os.environ}, "cwd": os.getcwd()}})'
    )
    transport = server(
        PRELUDE + report + "\n" + WAIT_FOR_EOF,
        env={"API_TOKEN": "s3cret", "PATH": "/opt/server/bin"},
        cwd=str(tmp_path),
    )

    with anyio.fail_after(10):
        async with transport.connect() as link:
            message = await answered(link)

    seen = message["params"]
    env = seen["env"]
    if "LC_CTYPE" not in expected:
        env.pop("LC_CTYPE", None)  # Python sets it in its own environment when the locale is C (PEP 538)
    assert env == expected
    assert seen["cwd"] == str(tmp_path)  # pytest's tmp_path is already a resolved path


# ---- stopping ---------------------------------------------------------------------------------------


READY = 'send({"jsonrpc": "2.0", "method": "ready", "params": {"pid": os.getpid()}})\n'
SPAWNS = """\
child = subprocess.Popen([sys.executable, "-c", "import signal\\nwhile True: signal.pause()"])
send({"jsonrpc": "2.0", "method": "pids", "params": {"leader": os.getpid(), "child": child.pid}})
"""


@pytest.mark.slow
async def test_a_process_that_stops_when_its_stdin_closes_is_not_signalled(log: LogLines) -> None:
    with anyio.fail_after(10):  # waiting out the 30 s grace would trip this bound
        async with server(PRELUDE + READY + WAIT_FOR_EOF, shutdown_grace=30).connect() as link:
            message = await answered(link)

    pid = message["params"]["pid"]
    assert f"server fx: process {pid} stopped (code 0)" in log.lines
    assert reaped(pid)


@pytest.mark.slow
async def test_a_process_stopped_by_cancellation_is_not_waited_for_past_its_exit(log: LogLines) -> None:
    # On shutdown everything is cancelled, the task watching the exit included: the stop must see
    # the exit itself, not wait out the grace (30 s here) for an event nobody will set.
    with anyio.fail_after(10), anyio.CancelScope() as scope:
        async with server(PRELUDE + READY + WAIT_FOR_EOF, shutdown_grace=30).connect() as link:
            message = await answered(link)
            scope.cancel()
            await anyio.sleep_forever()
    pid = message["params"]["pid"]
    assert f"server fx: process {pid} stopped (code 0)" in log.lines


@pytest.mark.slow
async def test_leaving_the_context_ends_the_process_and_everything_it_started(log: LogLines) -> None:
    with anyio.fail_after(15):
        async with server(PRELUDE + SPAWNS + WAIT_FOREVER, shutdown_grace=0.2).connect() as link:
            message = await answered(link)
            pids = message["params"]
            child = os.pidfd_open(pids["child"])
        try:
            await until_exited(child)
        finally:
            os.close(child)

    assert f"server fx: process {pids['leader']} stopped (code -15)" in log.lines
    assert reaped(pids["leader"])


@pytest.mark.slow
async def test_sigterm_goes_to_the_whole_group_so_every_process_can_clean_up(
    tmp_path: Path, log: LogLines
) -> None:
    marker = tmp_path / "cleaned-up"
    on_sigterm = (
        f"def stop(signum, frame):\n    open({str(marker)!r}, 'w').write('SIGTERM')\n    sys.exit(0)\n"
    )
    grandchild = PRELUDE + on_sigterm + "signal.signal(signal.SIGTERM, stop)\n" + READY + WAIT_FOREVER
    # The leader, on SIGTERM, waits for its child: it ends cleanly only if the child heard it too.
    leader = (
        PRELUDE
        + "signal.signal(signal.SIGTERM, lambda signum, frame: (os.wait(), sys.exit(0)))\n"
        + f"subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
        + 'send({"jsonrpc": "2.0", "method": "leader", "params": {"pid": os.getpid()}})\n'
        + WAIT_FOREVER
    )

    with anyio.fail_after(10):
        async with server(leader, shutdown_grace=0.5).connect() as link:
            started: dict[str, int] = {}
            while len(started) < 2:  # both said so, so both handlers are installed
                message = await answered(link)
                started[message["method"]] = message["params"]["pid"]

    assert marker.read_text() == "SIGTERM"
    assert f"server fx: process {started['leader']} stopped (code 0)" in log.lines


@pytest.mark.slow
async def test_what_outlives_the_process_is_killed_with_its_group(log: LogLines) -> None:
    with anyio.fail_after(15):
        async with script(SPAWNS, WAIT_FOR_EOF).connect() as link:
            message = await answered(link)
            pids = message["params"]
            child = os.pidfd_open(pids["child"])
        try:
            await until_exited(child)
        finally:
            os.close(child)

    # The leader left when its stdin closed; its child never reads stdin and would run on.
    assert f"server fx: process {pids['leader']} stopped (code 0)" in log.lines


@pytest.mark.slow
async def test_a_process_that_ignores_sigterm_is_killed_within_the_bound(log: LogLines) -> None:
    stubborn = PRELUDE + "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + READY

    with anyio.fail_after(5):  # stdin closed, 0.3 s, SIGTERM, 0.3 s, SIGKILL
        async with server(stubborn + WAIT_FOREVER, shutdown_grace=0.3).connect() as link:
            message = await answered(link)

    pid = message["params"]["pid"]
    assert f"server fx: process {pid} stopped (code -9)" in log.lines
    assert reaped(pid)


@pytest.mark.slow
async def test_a_cancelled_user_of_the_link_still_stops_the_process(log: LogLines) -> None:
    with anyio.fail_after(10):
        with anyio.CancelScope() as scope:
            async with server(PRELUDE + READY + WAIT_FOREVER, shutdown_grace=0.2).connect() as link:
                message = await answered(link)
                scope.cancel()
                await link.receive()  # cancelled here, with the process still running

    pid = message["params"]["pid"]
    assert scope.cancelled_caught
    assert f"server fx: process {pid} stopped (code -15)" in log.lines
    assert reaped(pid)


# ---- a process that leaves others holding its pipes ---------------------------------------------

HOLDS_PIPES = """\
hold = "import os, signal\\nif {setsid}:\\n    os.setsid()\\nsignal.pause()\\n"
grandchild = subprocess.Popen([sys.executable, "-c", hold])  # inherits stdin, stdout and stderr
pids = {{"leader": os.getpid(), "grandchild": grandchild.pid}}
send({{"jsonrpc": "2.0", "method": "pids", "params": pids}})
sys.stdin.buffer.readline()
os._exit(5)
"""


@pytest.mark.slow
@pytest.mark.parametrize("setsid", [False, True], ids=["same-group", "setsid"])
async def test_an_exit_is_seen_at_once_though_a_grandchild_holds_stdout_and_none_is_left_to_block_us(
    setsid: bool, log: LogLines
) -> None:
    with anyio.fail_after(10):
        async with script(HOLDS_PIPES.format(setsid=setsid)).connect() as link:
            pids = (await answered(link))["params"]
            grandchild = os.pidfd_open(pids["grandchild"])
            try:
                await link.send({"jsonrpc": "2.0", "method": "go"})
                with anyio.fail_after(2), pytest.raises(ServerUnavailable) as received:
                    await link.receive()  # its stdout is still open: only the process says it ended
                with pytest.raises(ServerUnavailable) as sent:
                    await link.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            except BaseException:
                os.close(grandchild)
                raise
        try:
            if setsid:  # out of the group, out of our reach: it runs on, holding nothing of ours open
                signal.pidfd_send_signal(grandchild, 0)  # alive: no ProcessLookupError
                os.kill(pids["grandchild"], signal.SIGKILL)
            else:
                await until_exited(grandchild)  # killed with the process group
        finally:
            os.close(grandchild)

    assert received.value.reason == sent.value.reason == "the process exited with code 5"
    assert f"server fx: process {pids['leader']} stopped (code 5)" in log.lines
    assert reaped(pids["leader"])


# ---- stderr ----------------------------------------------------------------------------------------

FLOODS_STDERR = """\
import threading
def flood():
    line = b"e" * 99 + b"\\n"
    for _ in range(400):  # 40 MB, in 100-byte lines
        sys.stderr.buffer.write(line * 1000)
    sys.stderr.buffer.flush()
    send({"jsonrpc": "2.0", "method": "flooded"})
threading.Thread(target=flood, daemon=True).start()
"""


@pytest.mark.slow
async def test_a_stderr_flood_neither_holds_up_stdout_nor_floods_our_log(log: LogLines) -> None:
    transport = StdioTransport(
        "fx",
        sys.executable,
        ["-c", PRELUDE + FLOODS_STDERR + ECHO],
        stderr_lines_kept=5,
        stderr_lines_logged_per_minute=10,
    )
    answered_within: list[float] = []
    with anyio.fail_after(60):
        async with transport.connect() as link:
            for n in range(50):  # bounded: 50 echoes, each well within a second
                started = anyio.current_time()
                await link.send({"jsonrpc": "2.0", "id": n, "method": "echo"})
                message = await answered(link)
                if message.get("method") == "flooded":
                    break
                answered_within.append(anyio.current_time() - started)
            while (await answered(link)).get("method") != "flooded":
                pass
            kept = transport.stderr_tail()

    assert answered_within
    assert max(answered_within) < 1.0
    assert kept == ["e" * 99] * 5
    stderr = [line for line in log.lines if line.startswith("server fx: stderr: ")]
    assert len(stderr) == 11  # ten lines, then how many more were not logged
    assert stderr[-1].startswith("server fx: stderr: (")
    assert "not logged" in stderr[-1]
