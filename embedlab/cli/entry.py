"""`embedlab ...`: the one parser, built from each command family's module; errors mapped to exit codes.

The serving commands (`cli/serve.py`) are parsed alone when one of them runs, so that a
worker process never imports the harness.

Exit codes: 0 success or passed, 1 a check failed, 2 could not run (bad arguments,
a start failure, an unreachable URL), 130 interrupted (143 by SIGTERM, where a run catches it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from .. import defaults
from ..defaults import EXIT_CANNOT_RUN, EXIT_FAILED
from .conformance import add_conformance
from .regress import add_regress
from .scenario import add_scenario
from .serve import SERVING, engine_options_from_args
from .stacks import STACK_COMMANDS
from .watch import add_watch

__all__ = ["build_parser", "engine_options_from_args", "main"]

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line and exit 2, as for every other reason a command cannot run.
        self.exit(EXIT_CANNOT_RUN, f"{self.prog}: error: {message}\n")

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        # --help shows every real default, also of options without help text (and not
        # "None" or "False", which say nothing).
        # `is`, not `in`: 0 == False, and a default of 0 is worth showing.
        meaningful = not any(
            action.default is v for v in (None, False, argparse.SUPPRESS)
        ) and action.default not in ("", [])
        if action.option_strings and meaningful and "default" not in (action.help or "").lower():
            action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"
        return action


# -- entry point ---------------------------------------------------------------------------

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    *SERVING,
    *STACK_COMMANDS,
    add_scenario,
    add_regress,
    add_conformance,
    add_watch,
]


DESCRIPTION = (
    "Prove how a frontend routes /v1/embeddings traffic across embedding workers: launch a frontend and "
    "its workers (or attach to a running deployment), send bounded bursts, and judge each worker's own "
    "request counter. Run one scenario with `embedlab scenario`, every scenario notebook with `embedlab regress`."
)
EPILOG = "exit codes: 0 passed (or figures reported, not asserted), 1 a check failed, 2 could not run, 130 interrupted"


def build_parser(*, command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; or, where `command` is a serving one (`worker`, `frontend`, ...),
    the serving commands alone.

    Building the harness's subcommands imports the scenarios, the stacks and httpx (with the
    rich and click that httpx's own CLI pulls in): 0.2 s of CPU in every worker process,
    which a pool of 64 pays on 2 cores before it answers anything.
    """
    serving = _new_parser(SERVING)
    if command is not None and command in _names(serving):
        return serving
    return _new_parser(SUBCOMMANDS)


def _names(parser: argparse.ArgumentParser) -> set[str]:
    return {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names: its first word that is neither an option nor a --plugin's value."""
    words = iter(argv)
    for word in words:
        if word == "--plugin":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _new_parser(
    commands: Sequence[Callable[[argparse._SubParsersAction], None]],
) -> argparse.ArgumentParser:
    parser = _Parser(prog="embedlab", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help=f"import MODULE first: the scenarios, stacks and engines it registers (repeat; also ${defaults.PLUGINS_ENV})",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in commands:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from ..errors import CheckFailedError, EmbedlabError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # Before the parser is built: the scenarios a plugin registers are subcommands of their own.
        _load_plugins(argv)
    except EmbedlabError as exc:
        print(f"embedlab: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    parser = build_parser(command=_command_of(argv))
    args = parser.parse_args(argv)
    args.argv = argv  # as typed: what a report says ran it
    run: Command = args.run
    try:
        return run(args)
    except KeyboardInterrupt as exc:
        print("embedlab: interrupted", file=sys.stderr)
        # 128 + the signal, as a shell reports it: 130 for Ctrl-C, 143 for the SIGTERM a run
        # caught (`regression.RunInterrupted` carries it; not imported here, for the workers' sake).
        return 128 + int(getattr(exc, "signum", 2))
    except CheckFailedError as exc:
        print(f"embedlab: FAILED: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_FAILED
    except (EmbedlabError, OSError) as exc:
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        print(f"embedlab {args.command}: error: {message}", file=sys.stderr)
        return EXIT_CANNOT_RUN


def _load_plugins(argv: Sequence[str]) -> None:
    """Import the `--plugin` modules and those of `EMBEDLAB_PLUGINS`; the processes this one
    starts (workers, notebook kernels) inherit the variable, so they import them too."""
    import os

    from ..plugins import load_plugins, plugin_modules

    named = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--plugin"]
    named += [a.split("=", 1)[1] for a in argv if a.startswith("--plugin=")]
    # A file by its absolute path: kernels and workers run in other folders.
    modules = [str(Path(m).resolve()) if m.endswith(".py") else m for m in [*plugin_modules(), *named]]
    modules = list(dict.fromkeys(modules))
    if modules:
        os.environ[defaults.PLUGINS_ENV] = ",".join(modules)
    load_plugins(modules)


if __name__ == "__main__":
    sys.exit(main())
