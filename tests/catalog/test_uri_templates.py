import random
import re
import time

import pytest

from proxy.catalog.merge import ServerSlice
from proxy.catalog.resources import build_resource_index
from proxy.catalog.uri_templates import UriSubject, compile_template

_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^}]*)\}")


def backtracking_pattern(template: str) -> re.Pattern[str]:
    """The regex routing used before: the oracle for which URIs a template matches."""
    parts: list[str] = []
    position = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[position : match.start()]))
        operator = match.group(1)
        if operator in ("+", "#"):
            parts.append(r"[^?]*" if operator == "+" else r"#.*")
        elif operator in ("?", "&"):
            parts.append(r"(?:[?&][^#]*)?")
        elif operator == "/":
            parts.append(r"(?:/[^/?#]*)*")
        else:
            parts.append(r"[^/?#]*" if operator == "" else re.escape(operator) + r"[^/?#]*")
        position = match.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


def matches(template: str, uri: str) -> bool:
    return compile_template(template).matches(UriSubject(uri))


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("file:///docs/{name}", "file:///docs/a.md", True),
        ("file:///docs/{name}", "file:///docs/a/b.md", False),  # a simple string stops at "/"
        ("s3://{+bucket}/{+key}", "s3://b/dir/key.txt", True),
        ("s3://{+bucket}/{+key}", "s3://b", False),
        ("s3://{+bucket}/{+key}", "s3://b/k?x=1", False),  # "+" stops at the query
        ("x://{a}{b}", "x://ab", True),
        ("x://{a}{b}", "x://a/b", False),
        ("db://{table}{?limit,offset}", "db://t?limit=1&offset=2", True),
        ("db://{table}{?limit}", "db://t", True),
        ("db://{table}{?limit}", "db://t#f", False),
        ("mem://{/path}", "mem:///a/b/c", True),
        ("mem://{/path}", "mem://", True),
        ("mem://{/path}", "mem://a", False),
        ("doc://{name}{#section}", "doc://n#s/t?u", True),
        ("doc://{name}{#section}", "doc://n", False),
        ("m://{x}{.ext}", "m://file.md", True),
        ("m://{x}{;p}", "m://a;b", True),
        ("plain://literal", "plain://literal", True),
        ("plain://literal", "plain://literally", False),
        ("ü://{name}/ß", "ü://naïve/ß", True),
        ("x://{a}/{b}", "x://\ud800/y", True),  # a lone surrogate (JSON allows it) is just a character
        ("x://{a}", "", False),
    ],
)
def test_templates_match_what_their_expansions_can_be(template: str, uri: str, expected: bool) -> None:
    assert matches(template, uri) is expected
    assert bool(backtracking_pattern(template).fullmatch(uri)) is expected


def test_every_uri_matches_exactly_when_the_old_regex_did() -> None:
    # Random small templates and URIs over the characters that matter; the regex is the oracle
    # (small inputs, so its backtracking costs nothing here).
    rng = random.Random(14)
    expressions = ["{a}", "{+a}", "{#a}", "{.a}", "{;a}", "{/a}", "{?a}", "{&a}"]
    pieces = [*expressions, "/", "a", "?", "#", "&", ".", "//"]
    alphabet = "/?#&.;a\nü"
    for _ in range(4_000):
        template = "x" + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 5)))
        uri = "x" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        expected = bool(backtracking_pattern(template).fullmatch(uri))
        assert matches(template, uri) is expected, (template, uri)


def test_the_first_matching_template_in_config_order_wins() -> None:
    index = build_resource_index(
        (),
        (
            ServerSlice("a", "a", ({"uriTemplate": "s3://{+bucket}/{+key}"},)),
            ServerSlice("b", "b", ({"uriTemplate": "s3://{bucket}/{key}"},)),
            ServerSlice("c", "c", ({"uriTemplate": "s3://{bucket}"},)),
        ),
    )
    assert index.route("s3://b/k") == "a"
    assert index.route("s3://b") == "c"
    assert index.route("other://b") is None


HOSTILE = ["s3://{+bucket}/{+key}", "x://{a}{b}", "x://{+a}//{+b}{/c}{?q}", "x://{a}{+b}{#c}"]


def build_hostile(template: str, size: int) -> str:
    # Slashes and letters that most expressions may take, and a "?" at the end that few may:
    # a backtracking regex tries every way to split the slashes before giving up.
    return template.partition("{")[0] + "/a" * (size // 2) + "?"


def _seconds(template: str, uri: str) -> float:
    compiled = compile_template(template)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        compiled.matches(UriSubject(uri))
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.slow
@pytest.mark.parametrize("template", HOSTILE)
def test_a_4_mib_uri_is_matched_in_time_linear_in_its_length(template: str) -> None:
    # The operation count below pins linearity; this pins the wall clock loosely enough for a
    # shared machine (a ratio of two timings flaked under load): a backtracking or quadratic
    # matcher takes minutes to hours on 4 MiB, the linear one ~25 ms on a quiet machine.
    large = build_hostile(template, 4 * 1024 * 1024)
    assert not matches(template, large)
    assert _seconds(template, large) < 2.0


def test_the_work_per_uri_is_a_few_masks_whatever_its_length() -> None:
    # The operation count: masks built (one pass each) do not grow with the URI.
    counts = []
    for size in (1_000, 100_000, 1_000_000):
        subjects = [UriSubject(build_hostile(template, size)) for template in HOSTILE]
        for template, subject in zip(HOSTILE, subjects, strict=True):
            compile_template(template).matches(subject)
        counts.append(sum(subject.masks_built for subject in subjects))
    assert counts[0] == counts[1] == counts[2] <= 12
