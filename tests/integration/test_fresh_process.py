"""What a fresh Python process imports: the lazy API, a hash worker, a serving command.

Each needs an interpreter of its own (this one has imported everything already), so these
live here and not in tests/unit.
"""

from __future__ import annotations

from ..commands import REPO, python_c


def run(code: str) -> str:
    proc = python_c(code, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_importing_the_package_loads_no_submodule() -> None:
    # The lazy API is what keeps a worker's start-up free of the harness's imports.
    out = run("import sys, embedlab; print(sorted(m for m in sys.modules if m.startswith('embedlab.')))")
    assert out == "[]", out


def test_hash_engine_imports_no_ml_library() -> None:
    code = (
        "import sys, asyncio\n"
        "from embedlab.engines import create_engine, EngineOptions\n"
        "from embedlab.serving import worker, frontend\n"
        "asyncio.run(create_engine('hash', EngineOptions()).embed(['x']))\n"
        "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'tokenizers') if m in sys.modules))\n"
    )
    assert run(code) == "[]"


def test_a_serving_command_imports_nothing_of_the_harness() -> None:
    """`embedlab worker ...` parses with the serving commands alone: no scenarios, stacks or httpx
    (0.2 s of CPU in every worker a pool starts)."""
    code = (
        "import sys; from embedlab.cli.entry import build_parser, _command_of\n"
        "argv = ['--plugin', 'x', 'worker', '--served-model-name', 'm', '--endpoint', 'a.b.c']\n"
        "assert _command_of(argv) == 'worker'\n"
        "build_parser(command='worker').parse_args(argv[2:])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'rich', 'pandas')"
        " or m.startswith(('embedlab.scenarios', 'embedlab.stacks', 'embedlab.cluster.deployment'))))\n"
    )
    assert run(code) == "[]"


def test_a_check_from_the_command_line_imports_no_plotting_library() -> None:
    """`embedlab scenario ...` draws nothing: matplotlib (0.3 s, and a cache folder it makes under
    HOME, or in /tmp where HOME is not writable) is imported only where a figure is drawn."""
    code = (
        "import sys; from embedlab.cli.entry import build_parser\n"
        "build_parser(command='scenario').parse_args(['scenario', 'same-model', '--requests', '6'])\n"
        "from embedlab.scenarios.plan import ScenarioPlan, run_scenario\n"
        "from embedlab.notebook.views import figures, tables\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    assert run(code) == "[]"
