"""`embedlab ...` as a user's shell runs it: its errors in one line with exit 2, its help, its plugins."""

from __future__ import annotations

from typing import Any

import pytest

from ..commands import run_embedlab, with_repo_on_path

# argparse wraps --help at hyphens: wide enough that no option's text breaks.
WIDE = {"COLUMNS": "500"}


def cli(*args: str, plugins: str = "") -> str:
    """A command's stdout, with `plugins` loaded (EMBEDLAB_PLUGINS); it must succeed."""
    proc = run_embedlab(*args, env={**with_repo_on_path(), "EMBEDLAB_PLUGINS": plugins, **WIDE})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--system-url", "http://127.0.0.1:9/", "--system-url", "http://127.0.0.1:9"],
            "a system URL is given more than once (http://127.0.0.1:9 as workers 0 and 1)",
        ),
        (
            [
                "--system-url",
                "http://127.0.0.1:9",
                "--system-url",
                "http://127.0.0.1:10",
                "--worker-models",
                "a,b,b",
            ],
            "2 system URLs but 3 worker models: give one per worker, in the order of the system URLs (--worker-models",
        ),
        (
            [
                *(a for port in range(9, 13) for a in ("--system-url", f"http://127.0.0.1:{port}")),
                "--models",
                "a,b",
            ],
            "4 system URLs but 2 models: --models names the models to send; say which model each worker "
            "serves with --worker-models, one per system URL in the same order, e.g. --worker-models a,a,b,b",
        ),
        (["--workers", "2", "--replicas", "3,1"], "workers = 2 and replicas = [3, 1] both count the workers"),
    ],
)
def test_the_cli_refuses_a_wrong_attach_in_one_line_with_exit_2(args: list[str], message: str) -> None:
    attach = ["--frontend-url", "http://127.0.0.1:9"] if "--system-url" in args else []
    proc = run_embedlab("scenario", "mixed", *attach, *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("embedlab scenario: error: ") and message in line, line
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "scenario, default",
    [("mixed", "2 of each model"), ("multi-model", "1 of each model"), ("same-model", "2, or one")],
)
def test_the_cli_help_gives_the_scenarios_own_workers_default(scenario: str, default: str) -> None:
    text = " ".join(cli("scenario", scenario, "--help").split())
    assert f"--workers WORKERS replicas of each model (default: {default}" in text, text
    assert "in place of workers (give one of the two)" in text
    # The plan's fields under their own names: no option renamed on its way to the plan.
    assert (
        "--model-paths MODEL_PATHS, --model-path MODEL_PATHS" in text and "--system-urls SYSTEM_URLS" in text
    )


def test_a_router_stack_from_a_plugin_module_is_listed_with_its_venv_and_joins_the_battery(
    router_plugin: Any,
) -> None:
    """No edit anywhere else: its venv and pins in `embedlab stacks --venvs` (`make routers`), its
    line in `embedlab stacks`, its name in the conformance battery's default stacks."""
    router_stack = router_plugin

    plugin = "tests.plugins.router_stack"
    lines = cli("stacks", "--venvs", plugins=plugin).splitlines()
    assert "\t".join((router_stack.NAME, *router_stack.PINS)) in lines, lines
    assert len(lines) == 6 and lines[0] == "litellm\tlitellm[proxy]==1.108.7"
    assert any(
        line.startswith(f"{router_stack.NAME}: discovery file; one host;")
        for line in cli("stacks", plugins=plugin).splitlines()
    )
    assert (
        f"(default: embedded,dynamo,litellm,vllm-router,sglang-router,smg,haproxy,nginx,{router_stack.NAME})"
        in cli("conformance", "--help", plugins=plugin)
    )
    assert router_stack.NAME not in cli("stacks", "--venvs")


def test_a_plugin_module_that_does_not_import_is_one_line_naming_it() -> None:
    proc = run_embedlab(
        "stacks", env={**with_repo_on_path(), "EMBEDLAB_PLUGINS": "tests.plugins.no_such_module"}
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot import plugin 'tests.plugins.no_such_module' (EMBEDLAB_PLUGINS)" in line, line
