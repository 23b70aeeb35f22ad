"""The verdicts a scenario or a notebook run can end in, named once.

    passed        everything asserted held
    failed        something asserted did not hold
    inconclusive  the evidence cannot decide (a counter reset mid-burst)
    reported      figures shown, nothing asserted: what a stack decides that embedlab does not
    unsupported   the stack cannot do what the check needs; the reason says why, in its own words
    error         the run itself broke before a verdict (a notebook cell raised, a kernel died)

Only `passed` is green anywhere. `reported` is not a failure either: it exits 0 and
counts as a passing JUnit test case, but every view shows it under its own name.

A whole `embedlab regress` run has a status beside its runs' verdicts (`RunStatus`):

    running       its process is still running notebooks
    interrupted   it stopped before its last notebook (a signal; or its process is gone)
    complete      every notebook ran
    incomplete    a merge of shards that lacks a part, or a job: never a pass
"""

from __future__ import annotations

import enum

__all__ = ["RunStatus", "Verdict"]


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    REPORTED = "reported"
    UNSUPPORTED = "unsupported"
    ERROR = "error"

    @property
    def ok(self) -> bool:
        """Nothing asserted failed: a pass, figures that were only reported, or a check the stack cannot take."""
        return self in (Verdict.PASSED, Verdict.REPORTED, Verdict.UNSUPPORTED)

    @classmethod
    def worst(cls, verdicts: list[Verdict] | tuple[Verdict, ...]) -> Verdict:
        """One verdict for several: doubt, then failure, then a report win over a pass.

        Doubt first: a failure seen beside a counter reset may be the reset's doing.
        """
        for candidate in (cls.ERROR, cls.INCONCLUSIVE, cls.FAILED, cls.REPORTED, cls.UNSUPPORTED):
            if candidate in verdicts:
                return candidate
        return cls.PASSED


class RunStatus(enum.StrEnum):
    """Where a whole regress run stands: only a complete run is history to compare with."""

    RUNNING = "running"
    INTERRUPTED = "interrupted"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
