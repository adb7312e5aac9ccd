"""Make the GraphQL examples importable (their blog store, schemas and servers are tested here)."""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graphql"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
