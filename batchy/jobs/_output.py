"""The ``batchy`` command's standard output: a write that fails there is the reader's doing.

``batchy jobs list app:queue | head`` closes the pipe after ten lines, and the
next ``print`` raises ``BrokenPipeError``, an ``OSError``. Inside a command that
error would pass for the store's own (a lost connection is an ``OSError`` too),
and the command said "cannot reach SQLite ...; check that the server is up", or
printed a traceback. While :func:`guarded_stdout` is on, a failed write raises
:class:`OutputFailed` instead, which no store mistakes for its own, and
:func:`output_failed` ends the command as a pipeline expects.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["OutputFailed", "guarded_stdout", "output_failed"]

#: The exit status of a command whose reader went away: a program killed by SIGPIPE
#: (128 + 13), as the shell reports ``yes | head``.
CLOSED = 141


class OutputFailed(Exception):
    """Standard output could not be written; ``__cause__`` is the ``OSError`` it raised."""


class _Guarded:
    """``stream``, whose failed writes and flushes raise :class:`OutputFailed`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise OutputFailed(error) from error

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise OutputFailed(error) from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """Standard output guarded while the block runs, and flushed before it ends.

    Flushed inside: a pipe's output is buffered, and its last write would
    otherwise fail only as the interpreter exits, with a message of its own.
    """
    stream = sys.stdout
    sys.stdout = _Guarded(stream)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stream


def output_failed(failed: OutputFailed) -> int:
    """The exit status of a command whose output failed, said on standard error if need be."""
    error = failed.__cause__
    try:
        # What is still buffered goes nowhere: the interpreter's own flush at exit
        # would fail again and print "Exception ignored ... BrokenPipeError".
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture)
        pass
    if isinstance(error, BrokenPipeError):
        return CLOSED  # the reader has all it wanted (`| head`): nothing to say
    print(f"batchy: error: cannot write to standard output: {error}", file=sys.stderr)
    return 1
