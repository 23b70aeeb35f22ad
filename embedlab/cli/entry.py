"""`embedlab ...`: parse, call one library function, map errors to exit codes.

Exit codes: 0 success or passed, 1 a check failed, 2 could not run (bad arguments,
a start failure, an unreachable URL), 130 interrupted (143 by SIGTERM, where a run catches it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import defaults
from ..wording import counted
from .scenario import add_scenario
from .serve import SERVING, engine_options_from_args, positive_float
from .stacks import STACK_COMMANDS

__all__ = ["build_parser", "engine_options_from_args", "main"]

EXIT_FAILED = 1
EXIT_CANNOT_RUN = 2

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
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


# -- harness -------------------------------------------------------------------------------


def _add_regress(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "regress",
        help="run every notebook for every parameter set of a matrix; write reports",
        description=REGRESS_DESCRIPTION,
        epilog=REGRESS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--matrix", type=Path, default=None, help="a TOML matrix (default: the packaged default matrix)"
    )
    p.add_argument(
        "--out", type=Path, default=Path("outputs"), help="runs go to OUT/<run-id>/ (default: outputs)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=defaults.CELL_TIMEOUT_S,
        help="seconds any one notebook cell may take",
    )
    p.add_argument("--show-code", action="store_true", help="show code cells in the HTML reports")
    p.add_argument(
        "-k",
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the jobs whose name (<notebook or scenario>--<set>) contains NAME; repeat for several",
    )
    p.set_defaults(run=_run_regress)


REGRESS_DESCRIPTION = """\
Runs every notebook of a TOML matrix once per parameter set, through papermill, and writes
OUT/<run-id>/: each executed notebook and its HTML report, results.json, junit.xml and
index.html (with what changed since the last run in OUT). The whole matrix is checked
before anything runs.

The matrix (the default one is embedlab/reports/matrices/default.toml):

  notebooks = ["same_model_load_balance", "multi_model_dispatch"]  # notebooks/<name>.ipynb
  scenarios = ["drain"]          # registered scenarios, run through notebooks/scenario.ipynb
  [defaults]                     # values under every parameter set
  requests = 20
  [[params]]                     # one parameter set; each notebook runs once per set
  name = "embedded-hash"         # the set's name in file names and history (keep it stable)
  stack = "embedded"
  notebooks = ["failover"]       # a set may list its own notebooks and scenarios
  [params.multi_model_dispatch]  # values for one notebook (or scenario) in this set only
  models = ["a", "b"]

Keys are the notebooks' parameters (their cell tagged `parameters`): stack, engine,
models, workers, weights, requests, concurrency, seed, ... An unknown notebook, scenario
or parameter, or a value the scenario cannot take, is one error line and exit 2."""
REGRESS_EPILOG = (
    "examples: embedlab regress -k same_model -k drain; embedlab regress --matrix my.toml --out runs/. "
    "Exit codes: 0 every run passed (or reported), 1 a run failed, 2 could not run, "
    "130 interrupted by Ctrl-C (143 by SIGTERM): the notebooks that finished keep their reports."
)


def _run_regress(args: argparse.Namespace) -> int:
    import shlex

    from ..reports.regress import regress

    run = regress(
        matrix=args.matrix,
        out=args.out,
        timeout=args.timeout,
        show_code=args.show_code,
        only=args.only,
        progress=lambda line: print(line, flush=True),
        command=shlex.join(["embedlab", *args.argv]),
    )
    counts = ", ".join(
        f"{sum(o.verdict == v for o in run.outcomes)} {v}" for v in sorted({o.verdict for o in run.outcomes})
    )
    print(f"{counted(len(run.outcomes), 'notebook run')} in {run.wall_seconds:.0f} s: {counts}")
    for outcome in run.failed:
        report = outcome.html or outcome.notebook_out
        print(f"FAILED {outcome.job.name}: {outcome.summary}\n    report: {report}", file=sys.stderr)
    print(run.index_html)
    return 0 if run.passed else EXIT_FAILED


def _add_conformance(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..cluster.stack_registry import battery_stacks
    from ..scenarios.battery import BATTERY

    p = sub.add_parser(
        "conformance",
        help="run the battery of checks against every stack; write a stack x check matrix",
        description="Each check is a registered scenario, run against each stack with its own defaults. Writes "
        "OUT/<run-id>/conformance.html, conformance.json and junit.xml. Exits 0 when every cell ran to a "
        "verdict (a failed check is a finding about a router, not a broken run), 1 when a cell broke.",
    )
    p.add_argument("--stacks", default=",".join(battery_stacks()), help="comma-separated stacks")
    p.add_argument(
        "--checks", default=",".join(BATTERY), help="comma-separated checks (registered scenarios)"
    )
    p.add_argument("--out", type=Path, default=Path("outputs"), help="runs go to OUT/<run-id>/")
    p.add_argument(
        "--worker-servers",
        default="embedlab",
        help="comma-separated worker servers, each stack in front of each: embedlab, vllm-serve, infinity, "
        "tei (rows STACK+SERVER; their own section of the Markdown)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=defaults.CELL_TIMEOUT_S,
        help="seconds any one notebook cell may take",
    )
    p.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="also write the matrix as Markdown here (docs/conformance.md)",
    )
    p.set_defaults(run=_run_conformance)


def _run_conformance(args: argparse.Namespace) -> int:
    from ..reports.conformance import conformance, write_servers_markdown

    split = lambda text: [part.strip() for part in text.split(",") if part.strip()]  # noqa: E731
    run = conformance(
        stacks=split(args.stacks),
        checks=split(args.checks),
        out=args.out,
        timeout=args.timeout,
        progress=lambda line: print(line, flush=True),
        worker_servers=split(args.worker_servers),
    )
    counts = ", ".join(
        f"{sum(c.verdict == v for c in run.matrix.cells)} {v}"
        for v in sorted({c.verdict for c in run.matrix.cells})
    )
    print(f"{len(run.matrix.cells)} cells: {counts}")
    if args.markdown:
        from ..jsonio import load_json
        from ..reports.index import write_conformance_markdown

        command = (
            "embedlab conformance " + " ".join(sys.argv[2:])
            if sys.argv[1:2] == ["conformance"]
            else "embedlab conformance"
        )
        # The sections other generators appended to the page (the 16-replica split) are kept;
        # rows in front of other worker servers go to their own section, merged with earlier runs'.
        data = load_json(run.json)
        own = [s for s in data["stacks"] if "+" not in s]
        if own:
            write_conformance_markdown(args.markdown, {**data, "stacks": own}, command=command)
        if len(own) < len(data["stacks"]):
            write_servers_markdown(args.markdown, data, command=command)
    print(run.html)
    return 0 if run.complete else EXIT_FAILED


# -- entry point ---------------------------------------------------------------------------

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [  # type: ignore[type-arg]
    *SERVING,
    *STACK_COMMANDS,
    add_scenario,
    _add_regress,
    _add_conformance,
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
    return {name for action in parser._subparsers._group_actions for name in action.choices}  # type: ignore[union-attr, attr-defined]


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
    commands: Sequence[Callable[[argparse._SubParsersAction], None]],  # type: ignore[type-arg]
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
