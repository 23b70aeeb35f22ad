"""The cell guard, in a real IPython shell: after a failed cell the next one refuses, by rule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from embedlab import EarlierCellFailedError
from embedlab.cellguard import check_previous_cell

GUARDED = "from embedlab.cellguard import check_previous_cell; check_previous_cell(); shown = True"


@pytest.fixture
def shell() -> Iterator[Any]:
    ip = InteractiveShell.instance()
    try:
        yield ip
    finally:
        InteractiveShell.clear_instance()


def run(shell: Any, code: str, cell_id: str) -> Any:
    return shell.run_cell(code, store_history=True, cell_id=cell_id)


def test_outside_ipython_it_does_nothing() -> None:
    check_previous_cell()


def test_a_cell_after_a_failed_one_refuses_naming_it(shell: Any) -> None:
    assert run(shell, "x = 1", "a").success
    failed = run(shell, "raise ValueError('bad engine')", "b")
    assert not failed.success
    refused = run(shell, GUARDED, "c")
    assert isinstance(refused.error_in_exec, EarlierCellFailedError)
    assert refused.error_in_exec.cell == f"In [{failed.execution_count}]"
    assert refused.error_in_exec.error == "ValueError: bad engine"
    assert "shown" not in shell.user_ns


def test_the_chain_names_the_cell_that_failed_first(shell: Any) -> None:
    failed = run(shell, "1/0", "a")
    run(shell, GUARDED, "b")
    third = run(shell, GUARDED, "c")
    assert isinstance(third.error_in_exec, EarlierCellFailedError)
    assert third.error_in_exec.cell == f"In [{failed.execution_count}]"
    assert third.error_in_exec.error.startswith("ZeroDivisionError")


def test_re_running_the_failed_cell_itself_is_allowed(shell: Any) -> None:
    run(shell, "raise ValueError('typo')", "a")
    assert run(shell, GUARDED, "a").success  # the same cell id: the user fixed it and ran it again


def test_a_cell_after_a_success_runs(shell: Any) -> None:
    run(shell, "raise ValueError('x')", "a")
    run(shell, "y = 2", "b")  # the user fixed the parameters: plain code that succeeds
    assert run(shell, GUARDED, "c").success


def test_a_failed_verdict_is_a_verdict_not_a_broken_run(shell: Any) -> None:
    code = "from embedlab import CheckFailedError\nraise CheckFailedError('same-model on embedded: FAILED')"
    run(shell, code, "a")
    assert run(shell, GUARDED, "b").success  # its figures are this run's: a table of them may follow


def test_a_syntax_error_counts_as_a_failure(shell: Any) -> None:
    run(shell, "engine = ", "a")
    refused = run(shell, GUARDED, "b")
    assert isinstance(refused.error_in_exec, EarlierCellFailedError)
    assert refused.error_in_exec.error.startswith("SyntaxError")
