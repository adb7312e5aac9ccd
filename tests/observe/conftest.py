"""Fixtures of the tracing and metrics tests: an in-memory tracer, the observe examples."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from observe_helpers import Traced

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "observe"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture
def traced() -> Iterator[Traced]:
    traced = Traced()
    yield traced
    traced.provider.shutdown()
