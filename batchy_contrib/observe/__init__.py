"""Watching batchy in production: OpenTelemetry traces (``otel``), Prometheus metrics."""
