"""The CI recipes of docs/sharding.md as YAML, and their `embedlab` steps as this machine runs them:
what tests/notebooks/test_regress_shards.py runs and tests/unit/reports/test_sharding_recipes.py checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARDING_DOC = REPO / "docs" / "sharding.md"
GITHUB, GITLAB = "GitHub Actions", "GitLab CI"


def recipe(title: str, doc: Path = SHARDING_DOC) -> Any:
    """The first ```yaml block of the doc's section `## {title}`, parsed."""
    import yaml

    text = doc.read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, f"{doc}: no ```yaml block under ## {title}"
    return yaml.safe_load(block.group(1))


def commands(lines: list[str], word: str) -> list[str]:
    """The lines that run `embedlab regress`, those containing `word` (`--shard`, `merge`)."""
    return [line for line in lines if "embedlab regress" in line and word in line]


def github_runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def step_using(job: dict[str, Any], action: str) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if s.get("uses", "").startswith(action)]
    return step


def here(command: str, bin_dir: Path, **values: str) -> str:
    """A recipe's command for this machine: its variables given `values`, the venv's embedlab."""
    for name, value in values.items():
        command = re.sub(
            r"\$\{\{\s*" + re.escape(name) + r"\s*\}\}|\$" + re.escape(name) + r"\b", value, command
        )
    assert "${{" not in command and "$CI_" not in command, f"unset variable in {command!r}"
    return command.replace(".venv/bin/", f"{bin_dir}/")
