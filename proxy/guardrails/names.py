"""Every detector name a guardrail rule may name: the built-in detectors' and the pseudo-detector
``inspection_limit`` (a walk stopped by a bound). Custom ones are ``custom:<name>``."""

from __future__ import annotations

from typing import Final

from proxy.guard.detect import Scanner

__all__ = ["BUILT_IN_DETECTORS", "LIMIT_DETECTOR"]

LIMIT_DETECTOR: Final = "inspection_limit"
BUILT_IN_DETECTORS: Final = Scanner.DETECTORS | {LIMIT_DETECTOR}
