"""Sphinx configuration for the batchy docs (built with warnings as errors by `make docs`)."""

project = "batchy"
author = "The batchy developers"
copyright = "2026, the batchy developers"
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
html_theme = "furo"
html_title = "batchy"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build"]
nitpicky = False
