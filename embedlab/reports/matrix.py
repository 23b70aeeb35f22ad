"""The regression matrix: which notebooks and scenarios run, with which parameters. Checked whole
before anything runs.

The matrix is TOML (see `embedlab/reports/matrices/default.toml`):

    notebooks = ["same_model_load_balance", "multi_model_dispatch"]
    scenarios = ["drain"]             # any registered scenario, through notebooks/scenario.ipynb
    [defaults]                        # under every set
    requests = 20
    [[params]]                        # one parameter set
    name = "embedded-hash"
    stack = "embedded"
    [params.multi_model_dispatch]     # for that notebook (or scenario) only
    models = ["a", "b"]

A notebook that names its scenario in its metadata (`metadata.embedlab.scenario`) has
its parameters checked as a `ScenarioPlan`: an unknown stack, engine or count fails the
load, not the run.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..defaults import NOTEBOOKS_ENV
from ..errors import ConfigError
from ..scenarios.params import knobs
from ..scenarios.plan import ScenarioPlan
from ..scenarios.registry import SCENARIOS
from ..wording import as_source

__all__ = [
    "GENERIC_NOTEBOOK",
    "Job",
    "Matrix",
    "load_matrix",
    "notebook_parameters",
    "params_in_effect",
    "params_slug",
    "shown_path",
]

# Set by the runner (the first two for every job, `stop_at_end` where a notebook takes it);
# a matrix that set them would scatter outputs, or leave a deployment up until the kernel exits.
RUNNER_PARAMS = ("run_dir", "result_json", "stop_at_end")
# Left out of a generated slug: long, machine-specific, or the same in every set.
_SLUG_SKIP = {"frontend_url", "system_urls", "model_paths", "scenario", *RUNNER_PARAMS}
# The notebook that runs any registered scenario, by its `scenario` parameter.
GENERIC_NOTEBOOK = "scenario"
_TOP_LEVEL = {"notebooks", "scenarios", "defaults", "params"}


@dataclass(frozen=True, kw_only=True)
class Job:
    """One notebook with one parameter set."""

    notebook: Path
    slug: str
    params: dict[str, Any]
    label: str = ""  # what the job is called: the notebook's stem, or the scenario it runs

    @property
    def name(self) -> str:
        """`<notebook or scenario>--<params-slug>`: file names and the key that history compares by."""
        return f"{self.label or self.notebook.stem}--{self.slug}"


@dataclass(frozen=True, kw_only=True)
class Matrix:
    path: Path
    jobs: tuple[Job, ...]

    def only(self, names: Sequence[str]) -> Matrix:
        """The jobs whose name contains one of `names` (all of them when `names` is empty)."""
        if not names:
            return self
        kept = tuple(job for job in self.jobs if any(name in job.name for name in names))
        if not kept:
            listed = ", ".join(job.name for job in self.jobs)
            raise ConfigError(f"no job of matrix {self.path} matches {', '.join(names)}; its jobs: {listed}")
        return replace(self, jobs=kept)


def default_notebook_dir() -> Path:
    """`$EMBEDLAB_NOTEBOOKS`, else `notebooks/` of the source checkout embedlab runs from."""
    if os.environ.get(NOTEBOOKS_ENV):
        return Path(os.environ[NOTEBOOKS_ENV])
    return Path(__file__).resolve().parents[2] / "notebooks"


def shown_path(path: Path) -> str:
    """`path` relative to the source checkout when it lies inside it: shorter, and the same on every machine."""
    root = Path(__file__).resolve().parents[2]
    resolved = Path(path).resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


def default_matrix_path() -> Path:
    return Path(str(resources.files("embedlab.reports") / "matrices" / "default.toml"))


def load_matrix(path: str | Path | None = None, *, notebook_dir: Path | None = None) -> Matrix:
    """Read and check a matrix: unknown notebooks, scenarios and parameters fail here, not mid-run.

    A notebook is a name in `notebook_dir` (default: `default_notebook_dir()`) or a path
    to an .ipynb, relative to the matrix file. A scenario is any registered name.
    """
    path = Path(path) if path is not None else default_matrix_path()
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read matrix {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"matrix {path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - _TOP_LEVEL)
    if unknown:
        raise ConfigError(
            f"matrix {path}: unknown top-level keys {unknown} (expected {', '.join(sorted(_TOP_LEVEL))})"
        )
    notebooks_dir = notebook_dir or default_notebook_dir()
    defaults = data.get("defaults", {})
    sets = data.get("params") or [{}]
    if not isinstance(defaults, dict) or not isinstance(sets, list):
        raise ConfigError(f"matrix {path}: [defaults] must be a table and [[params]] an array of tables")
    jobs: list[Job] = []
    for number, pset in enumerate(sets, 1):
        where = f"matrix {path}, parameter set {number}" + (f" ({pset['name']!r})" if "name" in pset else "")
        names = pset.get("notebooks", data.get("notebooks", []))
        scenarios = pset.get("scenarios", data.get("scenarios", []))
        if not isinstance(names, list) or not isinstance(scenarios, list) or not (names or scenarios):
            raise ConfigError(f"{where}: nothing to run (a `notebooks = [...]` or `scenarios = [...]` list)")
        entries: list[tuple[Path, str, str | None]] = [
            (_notebook_path(n, base=path.parent, notebooks_dir=notebooks_dir, where=where), n, None)
            for n in names
        ]
        if scenarios:
            generic = _notebook_path(
                GENERIC_NOTEBOOK, base=path.parent, notebooks_dir=notebooks_dir, where=where
            )
            for scenario in scenarios:
                if scenario not in SCENARIOS:
                    raise ConfigError(
                        f"{where}: unknown scenario {scenario!r}; registered: {', '.join(SCENARIOS.names())}"
                    )
                entries.append((generic, scenario, scenario))
        for notebook, label, scenario in entries:
            stem = Path(label).stem
            params = _params_for(stem, defaults, pset)
            if scenario is not None:
                params = _knobs_into_params(notebook, scenario, {"scenario": scenario, **params})
            _check_params(notebook, params, where)
            jobs.append(
                Job(
                    notebook=notebook, slug=pset.get("name") or params_slug(params), params=params, label=stem
                )
            )
    seen: dict[str, int] = {}
    for job in jobs:
        seen[job.name] = seen.get(job.name, 0) + 1
    clashes = sorted(n for n, count in seen.items() if count > 1)
    if clashes:
        raise ConfigError(
            f"matrix {path}: runs {clashes} would overwrite each other; give their sets distinct `name`s"
        )
    return Matrix(path=path, jobs=tuple(jobs))


def _notebook_path(name: str, *, base: Path, notebooks_dir: Path, where: str) -> Path:
    notebook = (base / name) if name.endswith(".ipynb") else notebooks_dir / f"{name}.ipynb"
    if not notebook.is_file():
        hint = (
            ""
            if name.endswith(".ipynb")
            else f" (names are looked up there; set {NOTEBOOKS_ENV}, or give a path to an .ipynb)"
        )
        raise ConfigError(f"{where}: notebook {notebook} does not exist{hint}")
    return notebook.resolve()


def _params_for(stem: str, defaults: dict[str, Any], pset: dict[str, Any]) -> dict[str, Any]:
    """[defaults], then the set's plain values, then the set's table for this notebook or scenario."""
    own = {
        k: v
        for k, v in pset.items()
        if k not in ("name", "notebooks", "scenarios") and not isinstance(v, dict)
    }
    return {**defaults, **own, **pset.get(stem, {})}


def _check_params(notebook: Path, params: dict[str, Any], where: str) -> None:
    taken = notebook_parameters(notebook)
    unknown = sorted(set(params) - set(taken))
    if unknown:
        raise ConfigError(f"{where}: {notebook.name} takes no parameter {unknown}; it takes {sorted(taken)}")
    reserved = sorted(set(params) & set(RUNNER_PARAMS))
    if reserved:
        raise ConfigError(
            f"{where}: {reserved} are set by the runner for every run; leave them out of the matrix"
        )
    scenario = params.get("scenario") or notebook_scenario(notebook)
    if scenario is not None:
        # What the notebook hands its plan: its own defaults, under the matrix's values (plan
        # fields, the scenario's knobs, and a `params` mapping of knobs where it takes one).
        handed = {f.name for f in fields(ScenarioPlan)} | knob_names(scenario)
        values = {
            **{k: ast.literal_eval(v) for k, v in taken.items() if k in handed},
            **params,
            "scenario": scenario,
        }
        try:
            ScenarioPlan.from_params(**{k: v for k, v in values.items() if k in handed})
        except ConfigError as exc:
            raise ConfigError(f"{where}: {notebook.name}: {exc}") from None


def knob_names(scenario: str) -> set[str]:
    """The names of `scenario`'s own knobs (an unknown scenario is the plan's error to raise)."""
    if scenario not in SCENARIOS:
        return set()
    return {k.name for k in knobs(SCENARIOS.get(scenario).params)}


def _knobs_into_params(notebook: Path, scenario: str, params: dict[str, Any]) -> dict[str, Any]:
    """A matrix's knobs for a scenario run through the generic notebook go into its `params` mapping."""
    taken = notebook_parameters(notebook)
    own = {k: params.pop(k) for k in list(params) if k in knob_names(scenario) and k not in taken}
    return {**params, "params": {**(params.get("params") or {}), **own}} if own else params


@functools.cache
def notebook_parameters(notebook: Path) -> dict[str, str]:
    """Names assigned in the cell tagged `parameters`, with their default's source text."""
    import papermill

    found = papermill.inspect_notebook(str(notebook))
    if not found:
        raise ConfigError(f"{notebook} has no code cell tagged 'parameters'")
    return {name: spec["default"] for name, spec in found.items()}


def params_in_effect(
    defaults: dict[str, str], given: dict[str, Any], result: dict[str, Any] | None
) -> dict[str, str]:
    """Every parameter a run had, as the report lists it: the notebook's defaults (as
    `notebook_parameters` reads them), the matrix's
    values over them, then what the run itself resolved (a `requests` of None sized from the
    pool, a fresh seed), where its result records a value the notebook did not say. The
    runner's own (run_dir, result_json, stop_at_end) are left out: they are the same in kind
    for every run."""
    shown = {k: v for k, v in defaults.items() if k not in RUNNER_PARAMS}
    shown.update({k: as_source(v) for k, v in given.items() if k not in RUNNER_PARAMS})
    for key, value in ((result or {}).get("params") or {}).items():
        said = shown.get(key)
        if said is None or said in ("None", "[]", '""'):
            shown[key] = f"{as_source(value)} (resolved by the run)" if key in shown else as_source(value)
    return shown


def notebook_scenario(notebook: Path) -> str | None:
    """The scenario a notebook runs, from its metadata (`metadata.embedlab.scenario`), if it says."""
    metadata = json.loads(notebook.read_text()).get("metadata", {})
    return (metadata.get("embedlab") or {}).get("scenario")


def params_slug(params: dict[str, Any], *, limit: int = 80) -> str:
    """A file-name-safe summary of a parameter set, e.g. `embedded-hash-tiny-bert+tiny-qwen3`."""
    parts = []
    # A scenario's knobs (the generic notebook's `params` mapping) read as the set's own keys.
    flat = {**{k: v for k, v in params.items() if k != "params"}, **(params.get("params") or {})}
    for key, value in flat.items():
        if key in _SLUG_SKIP or value in ("", None, [], ()):
            continue
        if isinstance(value, (list, tuple)):
            value = "+".join(str(v) for v in value)
        parts.append(str(value) if key in ("stack", "engine", "models") else f"{key}={value}")
    if params.get("frontend_url"):
        parts.append("attached")
    slug = re.sub(r"[^A-Za-z0-9_.+=-]+", "_", "-".join(parts)) or "default"
    if len(slug) > limit:
        digest = hashlib.sha1(slug.encode()).hexdigest()[:8]
        slug = f"{slug[: limit - 9]}-{digest}"
    return slug
