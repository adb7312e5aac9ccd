"""Serving batchy from web frameworks: ASGI, FastAPI, Flask and Django, with per-request stats."""
