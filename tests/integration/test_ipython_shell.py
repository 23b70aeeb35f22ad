"""What a real IPython shell shows of embedlab's errors and verdicts, as a notebook cell does.

Each shell runs in a process of its own: a shell installs global hooks (its display hook,
its exception handler) that would outlive a test in this one.
"""

from __future__ import annotations

from ..commands import shell_shows

TB_VERBOSE = r"""
shell.run_cell("from embedlab import ConfigError\ndef plan():\n    raise ConfigError('unknown engine x')\nplan()")
print("=====")
shell.run_cell("%tb verbose")
print("=====")
shell.run_cell("%xmode plain")
shell.run_cell("plan()")
"""
VERDICT_CELL = r"""
shell.run_cell('''
from embedlab import verdict
from embedlab.scenarios.result import ScenarioResult
from embedlab.verdicts import Verdict
verdict(ScenarioResult(scenario="mixed", stack="embedded", params={}, workers=[], bursts=[],
                       verdict=Verdict.FAILED, reasons=["alternate: it leaked"], engine="hash"))
''')
"""


def test_ipython_shows_an_embedlab_error_as_one_line_and_tb_verbose_shows_every_frame() -> None:
    shown, verbose, plain = shell_shows(TB_VERBOSE).split("=====\n")
    assert shown.strip().splitlines() == ["ConfigError: unknown engine x"], shown
    assert "Traceback" in verbose and "plan()" in verbose, verbose
    assert "raise ConfigError('unknown engine x')" in verbose, verbose
    assert "Traceback" in plain and "ConfigError: unknown engine x" in plain, plain


def test_a_failed_verdict_shows_its_line_once_in_a_notebook() -> None:
    shown = shell_shows(VERDICT_CELL).strip().splitlines()
    assert shown == ["CheckFailedError: mixed on embedded (hash): FAILED (alternate: it leaked)"], shown
