"""Which app a ``batchy`` command line names: a ``module:attribute`` word, --app or $BATCHY_APP.

``jobs``, ``dead`` and ``enqueue`` take the app and then ids (or a job name and its
arguments), and the app may be left out when ``$BATCHY_APP`` names it; so the first
of those words is the app only when it has the app's form, ``module:attribute``
(an attribute that is a Python name). An id of that form is taken for an app:
``--app`` names the app, and then every word is an id.
"""

from __future__ import annotations

import argparse
import os

from ._errors import ConfigError

__all__ = ["app_arguments", "choose_app", "hint", "is_app"]


def app_arguments(parser: argparse.ArgumentParser, *, positional: bool = True) -> None:
    """The app as a first word (``positional``) and as ``--app``, for ``parser``."""
    if positional:
        parser.add_argument(
            "app", nargs="?", help="module:attribute naming the Queue (default --app or "
            "$BATCHY_APP)",
        )  # fmt: skip
    parser.add_argument(
        "--app", dest="app_option", metavar="APP",
        help="module:attribute naming the Queue, as the first word does (default $BATCHY_APP)",
    )  # fmt: skip


def is_app(word: str) -> bool:
    """Whether ``word`` has an app's form (``myapp.jobs:queue``), not an id's or a job name's."""
    module, colon, attr = word.partition(":")
    return bool(colon) and module.split() == [module] and attr.isidentifier()


def choose_app(args: argparse.Namespace) -> None:
    """Set ``args.app`` to the app the command line names, and the other words to what they are.

    ``jobs`` and ``dead`` get their ids in ``args.ids``, ``enqueue`` its job name in
    ``args.job`` and its arguments in ``args.args``.
    """
    command, option = args.command, args.app_option
    args.app_word = False  # whether a word was taken for the app (see hint())
    if command not in ("jobs", "dead", "enqueue"):
        if option and args.app and option != args.app:
            raise ConfigError(
                f"`batchy {command}` was given two apps, {args.app!r} and --app {option!r}; "
                "give one"
            )
        args.app = args.app or option or os.environ.get("BATCHY_APP") or None
        return
    if command == "enqueue":
        words = [args.job, *args.args]
    else:
        words = [*([args.app] if args.app else []), *args.ids]
    if option:
        args.app = option
    elif words and is_app(words[0]):
        args.app, args.app_word = words.pop(0), True
    else:
        args.app = os.environ.get("BATCHY_APP") or None
    if args.app is None:
        said = f"; {words[0]!r} is not one (an id or a job name)" if words else ""
        raise ConfigError(
            f"`batchy {command}` has no app: name the batchy.jobs.Queue as "
            f"'module:attribute' first (`batchy {command} {_example(command)}`), or with "
            f"--app, or set BATCHY_APP=myapp.jobs:queue{said}"
        )
    if command != "enqueue":
        args.ids = words
    elif not words:
        raise ConfigError(
            f"`batchy enqueue` has the app {args.app!r} but no job: name the job type, "
            f"then its arguments as JSON (`batchy enqueue {_example(command)}`)"
        )
    else:
        args.job, args.args = words[0], words[1:]


def hint(args: argparse.Namespace, error: ConfigError) -> ConfigError:
    """``error`` (the app failed to load), saying how to name the app if a word was taken for it."""
    if not args.app_word or not os.environ.get("BATCHY_APP"):
        return error
    return ConfigError(
        f"{error} ({args.app!r} was taken for the app, being module:attribute; if it is "
        f"{'a job name' if args.command == 'enqueue' else 'an id'}, name the app with --app "
        "and it is read as one)"
    )


def _example(command: str) -> str:
    if command == "enqueue":
        return "myapp.jobs:queue myapp.jobs.send_welcome 42"
    if command == "jobs":
        return "delete myapp.jobs:queue ID..."
    return "retry myapp.jobs:queue ID..."
