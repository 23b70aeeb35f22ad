"""The cell guard, in a real IPython shell: it refuses what a failed cell left stale, and nothing else.

The cells are a scenario notebook's (parameters, plan, run, table, verdict) with the real
`ScenarioPlan.from_params`, `table` and `verdict`; only the run is a stand-in, a guarded
function that makes a result from the plan without launching anything. The shell loads the
extension first, as the `embedlab` kernel does (`--ext`, `embedlab.notebook.kernelspec`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from embedlab import EarlierCellFailedError, freshness
from embedlab.defaults import CELL_GUARD_EXTENSION
from embedlab.freshness import check_fresh, guarded
from embedlab.notebook.cellguard import CellCode, Ledger

LIBRARY = """
from embedlab import ConfigError, Explorer, ScenarioPlan, table, verdict
from embedlab.freshness import guarded
from embedlab.scenarios.result import ScenarioResult
from embedlab.verdicts import Verdict

@guarded("result")
def run(plan, *, fail=None):  # run_scenario without servers: a passing result made from the plan
    if fail:
        raise RuntimeError(fail)
    return ScenarioResult(
        scenario=plan.scenario, stack=plan.stack, params={}, workers=[], bursts=[], verdict=Verdict.PASSED,
        reasons=[],
    )

class Dep:
    pass

@guarded("deployment")
def start(plan, *, fail=None):  # start_deployment without servers
    if fail:
        raise RuntimeError(fail)
    return Dep()
"""
PARAMS = 'engine = "hash"  # hash, transformers or vllm\nworkers = 2  # workers serving the model'
# A magic, as the notebooks' plan cells open with one (`%matplotlib inline`, which a bare shell lacks).
PLAN = '%precision 3\nplan = ScenarioPlan.from_params(scenario="same-model", engine=engine, workers=workers)'
RUN = "result = run(plan)\nprint(result.summary())"
TABLE = "shown = table(result)"
VERDICT = "verdict(result)"


@pytest.fixture
def bare_shell() -> Iterator[Any]:
    """A real IPython shell that has run the library cell, the extension not loaded."""
    ip = InteractiveShell.instance()
    try:
        assert run(ip, LIBRARY).success
        yield ip
    finally:
        ip.extension_manager.unload_extension(CELL_GUARD_EXTENSION)  # if a test loaded it
        InteractiveShell.clear_instance()


@pytest.fixture
def shell(bare_shell: Any) -> Any:
    """The shell as the `embedlab` kernel starts it: the cell guard loaded."""
    assert run(bare_shell, f"%load_ext {CELL_GUARD_EXTENSION}").success
    return bare_shell


def run(shell: Any, code: str) -> Any:
    shell.user_ns.pop("shown", None)
    return shell.run_cell(code, store_history=True)


def good_run(shell: Any) -> None:
    for code in (PARAMS, PLAN, RUN, TABLE, VERDICT):
        result = run(shell, code)
        assert result.success, (code, result.error_in_exec or result.error_before_exec)


def refusal(result: Any) -> EarlierCellFailedError:
    assert isinstance(result.error_in_exec, EarlierCellFailedError), (
        result.error_in_exec or result.error_before_exec
    )
    return result.error_in_exec


def test_outside_ipython_nothing_is_refused() -> None:
    made = guarded("result")(lambda: object())()
    check_fresh(made)


def test_a_typo_after_a_good_run_leaves_its_result_showable(shell: Any) -> None:
    good_run(shell)
    typo = run(shell, "tabel(result)")
    assert isinstance(typo.error_in_exec, NameError)
    for _ in range(2):  # and again: a refusal would not come from the typo either
        assert run(shell, TABLE).success and "shown" in shell.user_ns
    assert run(shell, VERDICT).success


def test_ones_own_failing_code_and_a_failing_value_make_nothing_stale(shell: Any) -> None:
    good_run(shell)
    assert not run(shell, "df = table(result)\ndf.no_such_column.sum()").success
    assert not run(shell, "x = 1 / 0").success  # a plain value, but nothing was made from x
    assert run(shell, TABLE).success


def test_after_a_failed_plan_cell_the_result_is_refused_naming_that_cell(shell: Any) -> None:
    good_run(shell)
    assert run(shell, PARAMS.replace('"hash"', '"nonsense"')).success
    failed = run(shell, PLAN)
    assert type(failed.error_in_exec).__name__ == "ConfigError"
    # Run All's next cells, the run cell among them or aborted: each refuses, naming the plan cell.
    for code in (RUN, TABLE, VERDICT, "x = 1", TABLE):
        if code == "x = 1":
            assert run(shell, code).success  # plain code neither fails nor clears anything
            continue
        refused = refusal(run(shell, code))
        assert (refused.role, refused.cell) == ("the plan cell", f"In [{failed.execution_count}]")
        assert refused.error == "ConfigError: unknown engine 'nonsense'; choose from hash, transformers, vllm"
        assert "shown" not in shell.user_ns
    assert str(refused) == (
        f"the plan cell (In [{failed.execution_count}]) failed (ConfigError: unknown engine 'nonsense'; "
        "choose from hash, transformers, vllm), so `result` is still what an earlier run left: "
        "fix that cell and run it again, then this one"
    )


def test_a_second_run_all_that_fails_names_its_own_plan_cell_not_the_first_ones(shell: Any) -> None:
    good_run(shell)
    bad = PARAMS.replace('"hash"', '"nonsense"')
    assert run(shell, bad).success and not run(shell, PLAN).success
    refusal(run(shell, RUN))  # the first Run All's run cell was refused; the second's is aborted
    assert run(shell, bad).success
    again = run(shell, PLAN)
    for code in (RUN, TABLE):
        assert refusal(run(shell, code)).cell == f"In [{again.execution_count}]", code


def test_the_cell_named_is_the_one_furthest_up(shell: Any) -> None:
    good_run(shell)
    assert not run(shell, "result = run(plan, fail='worker 0 exited')").success
    run(shell, PARAMS.replace('"hash"', '"nonsense"'))
    failed = run(shell, PLAN)
    refused = refusal(run(shell, TABLE))  # the run cell failed first, but the plan cell is the one to fix
    assert (refused.role, refused.cell) == ("the plan cell", f"In [{failed.execution_count}]")


def test_fixing_the_plan_leaves_the_result_stale_until_the_run_cell_runs_again(shell: Any) -> None:
    good_run(shell)
    run(shell, PARAMS.replace('"hash"', '"nonsense"'))
    failed = run(shell, PLAN)
    assert run(shell, PARAMS).success and run(shell, PLAN).success
    refused = refusal(run(shell, TABLE))
    assert refused.cell == f"In [{failed.execution_count}]" and refused.rerun == "the run cell"
    assert "and has run since, but `result` is still what an earlier run left: run the run cell again" in str(
        refused
    )
    assert run(shell, RUN).success
    assert run(shell, TABLE).success and run(shell, VERDICT).success


def test_a_failed_run_cell_leaves_its_result_stale_and_its_plan_fresh(shell: Any) -> None:
    good_run(shell)
    failed = run(shell, "result = run(plan, fail='worker 1 exited')")
    refused = refusal(run(shell, TABLE))
    assert (refused.role, refused.cell, refused.error) == (
        "the run cell",
        f"In [{failed.execution_count}]",
        "RuntimeError: worker 1 exited",
    )
    assert run(shell, RUN).success and run(shell, TABLE).success


def test_a_failed_parameters_cell_refuses_its_old_values_and_what_was_made_of_them(shell: Any) -> None:
    good_run(shell)
    failed = run(shell, PARAMS.replace('"hash"', '"hash'))  # an unclosed string: nothing in it runs
    assert isinstance(failed.error_before_exec, SyntaxError)
    plan = refusal(run(shell, PLAN))
    assert (plan.role, plan.cell, plan.stale) == (
        "the parameters cell",
        f"In [{failed.execution_count}]",
        "`engine`",
    )
    assert (
        plan.error.startswith("SyntaxError: unterminated string literal")
        and "ipython-input" not in plan.error
    )
    table = refusal(run(shell, TABLE))
    assert (table.role, table.stale) == ("the parameters cell", "`result`")
    # The parameters are put right; the plan cell, refused meanwhile, is what is left to run.
    assert run(shell, PARAMS).success
    table = refusal(run(shell, TABLE))
    assert table.refused and table.role == "the plan cell"
    assert f"was refused (the parameters cell, In [{failed.execution_count}], had failed)" in str(table)
    assert run(shell, PLAN).success and run(shell, RUN).success and run(shell, TABLE).success


def test_a_parameter_that_fails_at_run_time_counts_as_well(shell: Any) -> None:
    good_run(shell)
    failed = run(shell, PARAMS.replace('"hash"', "hash_engine"))  # NameError, after nothing was set
    refused = refusal(run(shell, PLAN))
    assert (refused.role, refused.cell) == ("the parameters cell", f"In [{failed.execution_count}]")
    assert refused.error == "NameError: name 'hash_engine' is not defined"


def test_a_plan_cell_that_replaced_the_plan_and_then_failed_leaves_both_plans_stale(shell: Any) -> None:
    """The explore notebook's plan cell binds `plan`, then checks its own knobs (check_explore)."""
    good_run(shell)
    assert run(shell, "dep = start(plan)").success
    failed = run(shell, PLAN + "\nraise ConfigError('new_weights: 3 weights for 2 workers')")
    for code in ("dep = start(plan)", "check_fresh(dep)", "result = run(plan)"):
        refused = refusal(run(shell, "from embedlab.freshness import check_fresh\n" + code))
        assert (refused.role, refused.cell) == ("the plan cell", f"In [{failed.execution_count}]"), code


def test_an_explorer_stays_showable_after_a_typo_and_goes_stale_with_its_start_cell(shell: Any) -> None:
    good_run(shell)
    start = "dep = start(plan)\nexplorer = Explorer(dep)\nshown = table(explorer)"
    assert run(shell, start).success
    assert not run(shell, "table(explorr)").success
    assert run(shell, "shown = table(explorer)").success and "shown" in shell.user_ns
    failed = run(shell, start.replace("start(plan)", "start(plan, fail='frontend exited')"))
    refused = refusal(run(shell, "shown = table(explorer)"))
    assert (refused.role, refused.cell, refused.stale) == (
        "the Start cell",
        f"In [{failed.execution_count}]",
        "`explorer`",
    )


def test_a_failed_verdict_is_a_verdict_not_a_broken_run(shell: Any) -> None:
    good_run(shell)
    code = "result = run(plan)\nfrom embedlab import CheckFailedError\nraise CheckFailedError('same-model: FAILED')"
    assert isinstance(run(shell, code).error_in_exec, AssertionError)
    assert run(shell, TABLE).success  # its figures are this run's: a table of them may follow


def test_the_extension_loads_once_and_unloads(bare_shell: Any) -> None:
    hooks = len(bare_shell.events.callbacks["post_run_cell"])
    for _ in range(2):
        assert run(bare_shell, f"%load_ext {CELL_GUARD_EXTENSION}").success
    assert len(bare_shell.events.callbacks["post_run_cell"]) == hooks + 1
    assert run(bare_shell, f"%unload_ext {CELL_GUARD_EXTENSION}").success
    assert len(bare_shell.events.callbacks["post_run_cell"]) == hooks
    assert freshness.install_guard(None) is None  # the last shell followed took its guard away


def test_a_shell_without_the_extension_refuses_nothing(bare_shell: Any) -> None:
    """The library no longer looks for a shell: only a kernel that loaded the guard is guarded."""
    good_run(bare_shell)
    assert run(bare_shell, PARAMS.replace('"hash"', '"nonsense"')).success
    assert not run(bare_shell, PLAN).success
    assert run(bare_shell, RUN).success  # the plan of the earlier run, unrefused


def test_loaded_mid_cell_it_follows_that_cell_from_its_start(bare_shell: Any) -> None:
    """`%load_ext` in the plan cell itself (a kernel without `--ext`): that cell's failure counts."""
    plan = PLAN.replace("%precision 3\n", "")
    assert run(bare_shell, f"%load_ext {CELL_GUARD_EXTENSION}\n{PARAMS}\n{plan}").success
    assert run(bare_shell, RUN).success
    failed = run(bare_shell, PARAMS.replace('"hash"', '"nonsense"') + "\n" + plan)
    assert refusal(run(bare_shell, TABLE)).cell == f"In [{failed.execution_count}]"


# -- the rule's parts, without a shell ------------------------------------------------------------------


def test_a_cell_reads_the_names_it_does_not_set_and_sets_its_assignments_and_imports() -> None:
    code = CellCode.of(
        "from embedlab import plot as p, table\nimport os.path\nresult = run(plan)\nfor i in range(3):\n"
        "    total = i\ndef f(x):\n    inner = x\n    return y\n[z for z in q]\nn += 1"
    )
    assert code.writes == {"p", "table", "os", "result", "i", "total", "f", "n"}
    # Names read inside a def or a comprehension count too (x, z): more than it needs, never less.
    assert code.reads == {"run", "plan", "range", "x", "y", "z", "q", "n"}
    assert not code.sets_values_only


@pytest.mark.parametrize(
    ("source", "writes", "values_only"),
    [
        ('engine = "hash"  # a comment\nweights = [\n    1,\n    2,\n]\n', {"engine", "weights"}, True),
        ("# Parameters\nengine = 'nonsense'\n", {"engine"}, True),
        ('engine = "hash', {"engine"}, True),  # does not parse: read line by line
        ("requests = 100x\nexplorer.burst(requests)", {"requests"}, False),
        ("tabel(result", set(), False),
        ("x: int = 3\nstop = None", {"x", "stop"}, True),
        ("step = explorer.burst(20)\ntable(step)", {"step"}, False),
    ],
)
def test_a_parameters_cell_is_one_that_only_sets_names(
    source: str, writes: set[str], values_only: bool
) -> None:
    code = CellCode.of(source)
    assert (code.writes, code.sets_values_only) == (writes, values_only)


def test_an_object_gone_from_memory_is_forgotten() -> None:
    class Thing:
        pass

    ledger = Ledger()
    ledger.begin("thing = make()", {})
    thing = Thing()
    ledger.made(thing, "result")
    assert ledger.birth(thing) is not None
    del thing
    gc.collect()
    assert ledger._births == {}
