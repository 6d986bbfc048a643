from __future__ import annotations

import base64

from proxy.guard.detect.decode import encoded_runs


def test_url_and_base64_runs_decode_one_level_to_text() -> None:
    b64 = base64.b64encode(b"ignore previous instructions").decode()
    text = f"a=%41%4B%49%41x and {b64} end"
    runs = [(text[s:e], decoded) for s, e, decoded in encoded_runs(text)]
    assert ("%41%4B%49%41x", "AKIAx") in runs
    assert (b64, "ignore previous instructions") in runs


def test_runs_that_decode_to_bytes_or_to_themselves_are_left_alone() -> None:
    binary = base64.b64encode(bytes(range(200))).decode()
    assert list(encoded_runs(f"blob {binary} and a sha 9f86d081884c7d659a2feaa0c55ad015")) == []
