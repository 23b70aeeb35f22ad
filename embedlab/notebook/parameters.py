"""A scenario notebook's parameters cell and its plan call, written from the plan's fields and
the scenario's params class: each knob is declared once, in its class, never copied by hand.

A notebook's metadata names its scenario and the plan fields it takes, in order; `knobs`
stands for the scenario's own, in their class's order:

    "embedlab": {"scenario": "mixed", "parameters": ["stack", "engine", "knobs", "seed", "run_dir"]}

From them come the cell tagged `parameters` (one plain value per name, its default, its help
as the comment: papermill replaces the values, a JupyterLab user edits them) and, in the
next cell, `plan = ScenarioPlan.from_params(...)`, which hands each one to the plan by its
name. `result_json`, where the notebook saves its result, is the notebook's own and comes
last. After a knob is added to a params class (or a plan field to a notebook's list):

    python -m embedlab.notebook.parameters notebooks/*.ipynb            # rewrite the two cells
    python -m embedlab.notebook.parameters --check notebooks/*.ipynb    # exit 1 naming any that differ

Notebooks without `parameters` in their metadata (the generic `scenario.ipynb`, which takes
any scenario's knobs in one `params` mapping) are left as they are.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..wording import as_source

__all__ = ["generate", "main", "names", "parameters_source", "plan_source"]

KNOBS = "knobs"  # in a notebook's list: the scenario's own knobs, here
RESULT_JSON = ("result_json", "", "where to save the result as JSON; empty: not saved")
PLAN_CALL = "plan = ScenarioPlan.from_params("
WIDTH = 110


def _knobs_by_name(scenario: str) -> dict[str, Any]:
    from ..scenarios.params import knobs
    from ..scenarios.plan import ScenarioPlan
    from ..scenarios.registry import get_scenario

    shared = {k.name: k for k in knobs(ScenarioPlan) if k.help}
    return shared | {k.name: k for k in knobs(get_scenario(scenario).params)}


def names(meta: Mapping[str, Any]) -> list[str]:
    """The parameters a notebook with this `embedlab` metadata takes, in order (`result_json` last)."""
    from ..scenarios.params import knobs
    from ..scenarios.registry import get_scenario

    own = [k.name for k in knobs(get_scenario(meta["scenario"]).params)]
    listed = [n for name in meta["parameters"] for n in (own if name == KNOBS else [name])]
    known = _knobs_by_name(meta["scenario"])
    unknown = [n for n in listed if n not in known]
    if unknown:
        raise ConfigError(
            f"notebook parameters {unknown} are neither plan fields nor {meta['scenario']}'s knobs"
        )
    return [*listed, RESULT_JSON[0]]


def parameters_source(meta: Mapping[str, Any]) -> str:
    """The cell tagged `parameters`: each name, its default, its help."""
    from ..scenarios.plan import ScenarioPlan

    known = _knobs_by_name(meta["scenario"])
    resolved = ScenarioPlan(scenario=meta["scenario"]).resolved()  # what a None becomes for this scenario
    lines = []
    for name in names(meta)[:-1]:
        k = known[name]
        help = k.help
        if k.default is None and getattr(resolved, name, None) is not None:
            help += f"; None: {as_source(getattr(resolved, name))}"
        if "=" in help:
            # papermill reads no parameter whose comment holds one: it warns and loses the help.
            raise ConfigError(f"{name}'s help holds '=', which papermill cannot parse: reword it ({help!r})")
        lines.append(f"{name} = {as_source(k.default)}  # {help}")
    name, default, help = RESULT_JSON
    lines.append(f"{name} = {as_source(default)}  # {help}")
    return "\n".join(lines)


def plan_source(meta: Mapping[str, Any]) -> str:
    """The statement that hands every parameter to the plan, by its own name."""
    handed = ", ".join([f"scenario={as_source(meta['scenario'])}"] + [f"{n}={n}" for n in names(meta)[:-1]])
    body = textwrap.fill(
        handed + ",", WIDTH, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
    )
    return f"{PLAN_CALL}\n{body}\n)"


def generate(path: Path) -> str | None:
    """The notebook at `path` with its two cells as the classes say, in the form a save writes;
    None where its metadata lists no parameters."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    meta = nb.metadata.get("embedlab", {})
    if "parameters" not in meta:
        return None
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or "parameters" not in code[0].metadata.get("tags", []):
        raise ConfigError(f"{path}: its first code cell must be tagged 'parameters'")
    code[0].source = parameters_source(meta)
    cell = next((c for c in code[1:] if PLAN_CALL in c.source), None)
    if cell is None:
        raise ConfigError(f"{path}: no cell after the parameters builds the plan ({PLAN_CALL}...)")
    start = cell.source.index(PLAN_CALL)
    end = cell.source.index("\n)", start) + 2
    cell.source = cell.source[:start] + plan_source(meta) + cell.source[end:]
    return str(nbformat.writes(nb)) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m embedlab.notebook.parameters", description=__doc__.split("\n")[0]
    )
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming the notebooks that differ"
    )
    args = parser.parse_args(argv)
    differ = []
    for path in args.notebooks:
        text = generate(path)
        if text is None or text == path.read_text():
            continue
        differ.append(path)
        if not args.check:
            path.write_text(text)
    for path in differ:
        print(
            f"{path}: {'differs from' if args.check else 'rewritten from'} its params class and the plan's fields"
        )
    return 1 if differ and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
