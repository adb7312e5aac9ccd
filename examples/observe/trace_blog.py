"""Trace the blog page of ``examples/blog.py`` with OpenTelemetry and print its spans as a tree.

::

    python examples/observe/trace_blog.py --posts 50 --comments 20

The page's span holds one span per batch call (four) and one event per round
(three). This script keeps the spans in memory to print them; in production,
give your tracer provider an exporter (OTLP, say) and call
``otel.instrument()`` once at start-up.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from batchy_contrib.observe import otel


def load_blog() -> Any:
    """``examples/blog.py``, under a name of its own (``blog`` is taken by other examples)."""
    path = Path(__file__).resolve().parents[1] / "blog.py"
    spec = importlib.util.spec_from_file_location("batchy_example_blog", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trace_page(posts: int, comments: int, users: int) -> list[ReadableSpan]:
    """Render the page once under a ``GET /blog`` span; the spans it made, in end order."""
    blog = load_blog()
    blog.db = blog.Store(posts, comments, users, latency_ms=0)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    tracing = otel.instrument(tracer_provider=provider)
    try:
        with provider.get_tracer("blog").start_as_current_span("GET /blog"):
            blog.render_batchy(list(range(1, posts + 1)))
    finally:
        tracing.uninstrument()
    return list(exporter.get_finished_spans())


def tree(spans: list[ReadableSpan]) -> str:
    """The spans as an indented tree: events, then child spans in the order they started."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: (s.start_time or 0, s.name)):
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent, []).append(span)
    lines: list[str] = []

    def show(span: ReadableSpan, depth: int) -> None:
        attributes = span.attributes or {}
        keys = f" keys={attributes['batchy.keys']}" if "batchy.keys" in attributes else ""
        linked = f" links={len(span.links)}" if span.links else ""
        lines.append(f"{'  ' * depth}{span.name}{keys}{linked}")
        for event in span.events:
            a = event.attributes or {}
            loaders = ", ".join(a.get("batchy.loaders", ()))  # type: ignore[arg-type]
            lines.append(f"{'  ' * depth}  . round {a.get('batchy.round')}: {loaders}")
        assert span.context is not None
        for child in children.get(span.context.span_id, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=50, help="posts on the page (50)")
    parser.add_argument("--comments", type=int, default=20, help="comments per post (20)")
    parser.add_argument("--users", type=int, default=200, help="users who comment (200)")
    args = parser.parse_args(argv)
    print(tree(trace_page(args.posts, args.comments, args.users)))


if __name__ == "__main__":
    main()
