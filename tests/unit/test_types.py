"""mypy reads the package as its users' checkers do (`py.typed` ships): no error, and every
`type: ignore` left names its error code and says why, on its line or the comment line above."""

from __future__ import annotations

import re
from pathlib import Path

from ..conftest import REPO
from ..requires import missing

IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


# Checked beside the package in the same run: a scenario's knob whose default is of the wrong
# type is an error, on its line, and nothing else is.
WRONG_KNOB = """\
from dataclasses import dataclass

from embedlab import knob


@dataclass(frozen=True, kw_only=True)
class Params:
    requests: int = knob("many", "requests in the burst")
    budget_s: float | None = knob(None, "a default of None is fine")
"""


def test_mypy_finds_no_error_in_the_package_and_a_wrong_knob_default(tmp_path: Path) -> None:
    try:
        from mypy import api
    except ImportError:
        missing("mypy", "mypy is not installed: the `dev` extra brings it")
    probe = tmp_path / "wrong_knob.py"
    probe.write_text(WRONG_KNOB)
    # In-process, with the pyproject's [tool.mypy] settings; the cache stays in the run's temp.
    out, err, status = api.run(
        [
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--no-incremental",
            str(REPO / "embedlab"),
            str(probe),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 1, out[-6000:] + err[-2000:]
    assert errors[0].startswith(f"{probe}:8: error: Incompatible types in assignment"), errors


def _why(lines: list[str], index: int, rest: str) -> str:
    said = rest.strip().lstrip("#").strip()
    if said:
        return said
    above = lines[index - 1].strip() if index else ""
    return above.lstrip("#").strip() if above.startswith("#") else ""


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    unexplained = []
    for path in sorted((REPO / "embedlab").rglob("*.py")):
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            found = IGNORE.search(line)
            if found is None:
                continue
            where = f"{path.relative_to(REPO)}:{index + 1}"
            if not found["codes"]:
                unexplained.append(f"{where}: no error code")
            elif len(_why(lines, index, found["rest"]).split()) < 3:
                unexplained.append(f"{where}: no reason")
    assert not unexplained, "\n".join(unexplained)
