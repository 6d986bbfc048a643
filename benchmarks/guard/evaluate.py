"""``make guard-eval``: precision and recall of Manifold's guardrail detectors, their cost, and
the secrets part beside detect-secrets, on the labelled corpus in ``corpus/``.

Scoring is by span. For each sample and detector, the labels' spans are what should be found and
the scanner's findings (overlapping ones merged) what was found: a finding that overlaps a label
of its detector is a true positive, one that overlaps none a false positive, a label no finding
overlaps a false negative. Precision = TP / (TP + FP), recall = labels found / labels.
Reported per detector and per direction (arguments, result, definition), for the tuning set
and for the held-out set (committed before the detectors were written; never tuned on).

detect-secrets (Yelp, PyPI; its default plugins and filters, as ``detect-secrets scan`` runs
them) scans the same samples, one file per sample; its findings are scored against all the
secret labels together (it does not name detectors the way Manifold does), as are Manifold's.

Cost: all detectors over a realistic 4 KiB tool result and over 4 MiB of the same kind of
content, CPU µs per KiB (the scanning thread's CPU time, median of repeated runs), to show
cost is linear in size.

``python -m benchmarks.guard.evaluate`` prints the report and writes ``results.md``;
``--no-cost`` skips the timing, ``--no-write`` leaves the file alone.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from proxy.guard.detect import Scanner, ScannerSettings

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
RESULTS = HERE / "results.md"
SECRET_DETECTORS = frozenset(
    {
        "aws_access_key", "aws_secret_key", "gcp_api_key", "gcp_service_account", "azure_storage_key",
        "github_token", "gitlab_token", "slack_token", "slack_webhook", "discord_token",
        "discord_webhook", "stripe_key", "twilio_key", "sendgrid_key", "openai_key", "anthropic_key",
        "huggingface_token", "npm_token", "pypi_token", "private_key", "jwt", "generic_secret",
        "manifold_secret",
    }
)  # fmt: skip
CHECKSUMMED_PII = frozenset({"payment_card", "iban", "national_id"})
SIGNALS = frozenset({"injection", "hidden_text", "exfil_link", "tool_poisoning"})


@dataclass
class Tally:
    tp: int = 0  # findings that overlap a label
    fp: int = 0
    found: int = 0  # labels some finding overlaps
    labels: int = 0

    def add(self, other: Tally) -> None:
        self.tp += other.tp
        self.fp += other.fp
        self.found += other.found
        self.labels += other.labels

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.found / self.labels if self.labels else None


def load(which: str) -> list[dict[str, object]]:
    with (CORPUS / f"{which}.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def settings() -> ScannerSettings:
    raw = json.loads((CORPUS / "settings.json").read_text(encoding="utf-8"))
    return ScannerSettings(
        own_secrets=tuple(raw["own_secrets"]),
        custom_patterns=dict(raw["custom_patterns"]),
        word_lists={k: tuple(v) for k, v in raw["word_lists"].items()},
        allowed_hosts=tuple(raw["allowed_hosts"]),
        decode=bool(raw["decode"]),
    )


def merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def score(expected: list[tuple[int, int]], predicted: list[tuple[int, int]]) -> Tally:
    predicted = merged(predicted)

    def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
        return a[0] < b[1] and b[0] < a[1]

    tp = sum(any(overlaps(p, e) for e in expected) for p in predicted)
    found = sum(any(overlaps(e, p) for p in predicted) for e in expected)
    return Tally(tp, len(predicted) - tp, found, len(expected))


def label_spans(sample: dict[str, object]) -> dict[str, list[tuple[int, int]]]:
    text = str(sample["text"])
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for detector, match in sample["labels"]:  # type: ignore[attr-defined]
        start = text.find(match)
        spans[detector].append((start, start + len(match)))
    return spans


def evaluate(scanner: Scanner, samples: list[dict[str, object]]) -> dict[str, dict[str, Tally]]:
    """Tallies by detector, by ``direction:detector`` and by group (``all`` for each)."""
    by: dict[str, dict[str, Tally]] = {"detector": defaultdict(Tally), "direction": defaultdict(Tally)}
    for sample in samples:
        expected = label_spans(sample)
        found: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for f in scanner.scan(str(sample["text"]), kind=str(sample["kind"])):
            found[f.detector].append((f.start, f.end))
        for detector in set(expected) | set(found):
            tally = score(expected.get(detector, []), found.get(detector, []))
            by["detector"][detector].add(tally)
            group = (
                "secrets"
                if detector in SECRET_DETECTORS
                else "checksummed personal data"
                if detector in CHECKSUMMED_PII
                else "injection signals"
                if detector in SIGNALS
                else "other personal data and content"
            )
            by["direction"][f"{sample['direction']} / {group}"].add(tally)
            by["direction"][f"all / {group}"].add(tally)
    return by


def secrets_tally(samples: list[dict[str, object]], found: list[list[tuple[int, int]]]) -> Tally:
    total = Tally()
    for sample, spans in zip(samples, found, strict=True):
        expected = [
            span for d, spans_ in label_spans(sample).items() if d in SECRET_DETECTORS for span in spans_
        ]
        total.add(score(expected, spans))
    return total


def manifold_secret_spans(scanner: Scanner, samples: list[dict[str, object]]) -> list[list[tuple[int, int]]]:
    return [
        [
            (f.start, f.end)
            for f in scanner.scan(str(s["text"]), kind=str(s["kind"]))
            if f.category == "secret"
        ]
        for s in samples
    ]


def detect_secrets_spans(samples: list[dict[str, object]]) -> list[list[tuple[int, int]]] | None:
    """detect-secrets' findings as spans, or ``None`` when it is not installed."""
    try:
        from detect_secrets.core.scan import scan_file
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    out: list[list[tuple[int, int]]] = []
    with tempfile.TemporaryDirectory() as tmp, default_settings():
        for index, sample in enumerate(samples):
            text = str(sample["text"])
            path = Path(tmp) / f"sample{index}.txt"
            path.write_text(text, encoding="utf-8")
            lines = text.split("\n")
            offsets = [0]
            for line in lines:
                offsets.append(offsets[-1] + len(line) + 1)
            spans = []
            for secret in scan_file(str(path)):
                line_no = secret.line_number - 1
                line = lines[line_no] if 0 <= line_no < len(lines) else ""
                value = secret.secret_value or ""
                at = line.find(value) if value else -1
                if at >= 0:
                    spans.append((offsets[line_no] + at, offsets[line_no] + at + len(value)))
                else:
                    spans.append((offsets[line_no], offsets[line_no] + len(line)))
            out.append(spans)
    return out


# --------------------------------------------------------------------------- cost

_RESULT_PARTS = (
    "## Search results for `retry policy`\n\n",
    "1. **docs/retry.md** (score 0.82): The client retries idempotent requests up to 3 times with "
    "exponential backoff (base 200 ms, jitter 20%). Non-idempotent calls are never retried.\n",
    "```python\ndef backoff(attempt: int) -> float:\n"
    "    return min(30.0, 0.2 * 2 ** attempt) * random.uniform(0.8, 1.2)\n```\n",
    '{"id": "6fa459ea-ee8a-3ca4-894e-db77e160355e", "commit": "9fceb02d0ae598e95dc970b74767f19372d61af8", '
    '"author": "Build Bot", "updated": "2024-05-01T12:00:01Z", "status": "open", "labels": ["bug", "p2"]}\n',
    "2. **src/http/client.py** (score 0.77): `RetryPolicy(max_attempts=3, statuses={502, 503, 504})` "
    "is passed to every session; see [the design note](https://docs.example.com/design/retries).\n",
    "| endpoint | p50 ms | p99 ms | errors |\n|---|---|---|---|\n| /v1/items | 12.4 | 88.1 | 0.02% |\n",
    "Contact the owning team in #platform-http before changing the defaults. Last reviewed by "
    "the SRE rotation on Tuesday; the runbook lives next to the dashboards.\n",
)


def realistic(size: int) -> str:
    out: list[str] = []
    length = 0
    index = 0
    while length < size:
        part = _RESULT_PARTS[index % len(_RESULT_PARTS)].replace("3 times", f"{index % 7 + 2} times")
        out.append(part)
        length += len(part)
        index += 1
    return "".join(out)[:size]


def cost(scanner: Scanner) -> list[tuple[str, float, int]]:
    """``(label, µs per KiB, runs)`` for 4 KiB and 4 MiB."""
    rows = []
    for label, size, runs in (("4 KiB tool result", 4096, 400), ("4 MiB tool result", 4 << 20, 5)):
        text = realistic(size)
        scanner.scan(text, kind="result")  # warm
        timings = []
        for _ in range(runs):
            begin = time.thread_time()  # CPU time: what a scan costs, whatever else the box runs
            scanner.scan(text, kind="result")
            timings.append(time.thread_time() - begin)
        rows.append((label, statistics.median(timings) * 1e6 / (size / 1024), runs))
    return rows


# --------------------------------------------------------------------------- report


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(title: str, tallies: dict[str, Tally]) -> list[str]:
    lines = [
        f"| {title} | labels | found | TP | FP | precision | recall |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in sorted(tallies):
        t = tallies[name]
        lines.append(
            f"| {name} | {t.labels} | {t.found} | {t.tp} | {t.fp} | {fmt(t.precision)} | {fmt(t.recall)} |"
        )
    return lines


def report(include_cost: bool) -> str:
    scanner = Scanner(settings())
    out = ["# Guardrail detectors: evaluation", ""]
    out.append(
        "Generated by `make guard-eval` (`python -m benchmarks.guard.evaluate`). Corpus: "
        "`benchmarks/guard/corpus/` (see `make_corpus.py` for how it is built and split). "
        "Span-level scoring: a finding overlapping a label of its detector is a true positive."
    )
    for which in ("heldout", "tuning"):
        samples = load(which)
        by = evaluate(scanner, samples)
        title = "Held-out set (never tuned on)" if which == "heldout" else "Tuning set"
        out += ["", f"## {title}: {len(samples)} samples", ""]
        out += [*table("group by direction", by["direction"]), ""]
        out += table("detector", by["detector"])
        ours = secrets_tally(samples, manifold_secret_spans(scanner, samples))
        theirs_spans = detect_secrets_spans(samples)
        out += ["", f"### Secrets, all labels together: Manifold vs detect-secrets ({which})", ""]
        rows = {"Manifold guard.detect": ours}
        if theirs_spans is not None:
            version = importlib.metadata.version("detect-secrets")
            rows[f"detect-secrets {version} (default plugins)"] = secrets_tally(samples, theirs_spans)
        else:
            out.append("detect-secrets is not installed (`pip install -e '.[guard-eval]'`).")
        out += table("scanner", rows)
    if include_cost:
        out += [
            "",
            "## Cost (all detectors, one scan, median of the thread's CPU time)",
            "",
            "| input | µs per KiB | runs |",
            "|---|---:|---:|",
        ]
        for label, per_kib, runs in cost(scanner):
            out.append(f"| {label} | {per_kib:.1f} | {runs} |")
        loadavg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        out += [
            "",
            f"Python {sys.version.split()[0]}, one thread; load average (1, 5, 15 min) after: {loadavg}.",
        ]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-cost", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    text = report(not args.no_cost)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
