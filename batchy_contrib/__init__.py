"""Integrations of batchy with third-party stores and frameworks, each behind its extra."""
