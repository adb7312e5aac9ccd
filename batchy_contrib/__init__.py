"""Integrations of batchy with third-party stores and frameworks, each behind its extra."""

from ._extras import MissingExtraError

__all__ = ["MissingExtraError"]
