"""The guard's rule, kept apart from IPython: which objects a failed cell left stale, and what to say.

`Ledger` is told when a cell begins and ends (with its error), and what each guarded call
made; it answers whether a call on some objects must be refused, and why.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import CheckFailedError, EarlierCellFailedError
from .cells import CellCode

__all__ = ["ROLES", "Birth", "Failure", "Ledger", "Stale"]

# What a cell that makes each kind is called, upstream first: a failed cell that would
# have replaced several kinds is named after the first of them.
ROLES: dict[str, str] = {
    "plan": "the plan cell",
    "matrix": "the battery cell",
    "deployment": "the Start cell",
    "explorer": "the Start cell",
    "result": "the run cell",
    "sweep": "the sweep cell",
    "step": "the burst cell",
}
PARAMETERS_ROLE = "the parameters cell"
OTHER_ROLE = "the cell that made it"
# Which failed cell to name first: the one further up a notebook.
_UPSTREAM = [PARAMETERS_ROLE, *dict.fromkeys(ROLES.values()), OTHER_ROLE]


@dataclass(eq=False)
class Birth:
    """Where one guarded object came from: the cell run (`seq`) that made it, what it is, what
    it was made from, and the names that cell read."""

    seq: int
    kind: str
    reads: frozenset[str]
    parents: tuple[Birth, ...] = ()

    def lineage(self) -> Iterator[Birth]:
        """This birth and every one it was made from, each once."""
        seen: set[int] = set()
        stack = [self]
        while stack:
            birth = stack.pop()
            if id(birth) not in seen:
                seen.add(id(birth))
                yield birth
                stack.extend(birth.parents)


@dataclass(eq=False, frozen=True)
class Failure:
    """A failed cell that made something stale: when (`seq`), what it does (`role`), which
    execution it was (`cell`: `In [3]`) and its error's first line.

    A refused cell's `root` is the failure it was refused for (the first of a chain), so
    every refusal down a Run All names that one, while it is not put right."""

    seq: int
    role: str
    cell: str
    error: str
    kinds: frozenset[str] = frozenset()  # what it would have replaced: plan, result, ...
    names: frozenset[str] = frozenset()  # the values a failed parameters cell would have set
    root: Failure | None = None


@dataclass
class _Running:
    """The cell being run: its code, the guarded objects its names held before it ran, and
    the failure a call in it was refused for."""

    seq: int
    code: CellCode
    before: list[Birth] = field(default_factory=list)
    refused_for: Failure | None = None


@dataclass(frozen=True)
class Stale:
    """Why a call is refused: the failure to name, what it left (`what`: "`result`"), and how
    it stands: `refused`, that cell was refused for a failure since put right; `rerun`, the
    failure itself is put right and the cell named there is left to run again."""

    failure: Failure
    what: str
    refused: Failure | None = None
    rerun: str | None = None

    def error(self) -> EarlierCellFailedError:
        f = self.failure
        if self.refused is not None:
            why = f"{self.refused.role}, {self.refused.cell}, had failed"
            return EarlierCellFailedError(role=f.role, cell=f.cell, error=why, stale=self.what, refused=True)
        return EarlierCellFailedError(
            role=f.role, cell=f.cell, error=f.error, stale=self.what, rerun=self.rerun
        )


class Ledger:
    """Births and failures of one shell's cells; decides what is stale. Pure: the shell's
    namespace is passed in, and nothing here imports or calls IPython."""

    def __init__(self) -> None:
        self._seq = 0
        self._births: dict[int, tuple[weakref.ref[Any], Birth]] = {}
        self._replaced: dict[Birth, Failure] = {}  # the first failure that would have replaced each
        self._stale_names: dict[str, Failure] = {}  # set by a failed parameters cell, until set again
        self._last_made: dict[str, int] = {}  # kind -> the cell run that last made one
        self._failures: list[Failure] = []  # those that failed themselves (not refused), in order
        self.running: _Running | None = None

    # The shell's events.

    def begin(self, source: str, namespace: Mapping[str, Any]) -> None:
        """A cell starts: `source` is its code with magics transformed."""
        self._seq += 1
        code = CellCode.of(source)
        self.running = _Running(self._seq, code, self._held(code.writes, namespace))

    def end(self, *, cell: str, error: BaseException | None, namespace: Mapping[str, Any]) -> None:
        """The running cell ended; `cell` is how people know it (`In [3]`), `error` why it failed."""
        running, self.running = self.running, None
        if running is None:
            return
        code = running.code
        if error is None:
            for name in code.writes:
                self._stale_names.pop(name, None)
            return
        if isinstance(error, CheckFailedError):
            return  # a verdict on this run's own figures: they are still this run's
        replaced = running.before + self._held(code.writes, namespace)
        refused_for = running.refused_for if isinstance(error, EarlierCellFailedError) else None
        # A refused cell set nothing: its names hold what they held, and say nothing new.
        names = code.writes if code.sets_values_only and refused_for is None else frozenset()
        if not replaced and not names:
            return  # a typo, one's own code, a failed figure: nothing it would have replaced
        kinds = frozenset(b.kind for b in replaced)
        role = (
            next((r for kind, r in ROLES.items() if kind in kinds), OTHER_ROLE)
            if replaced
            else PARAMETERS_ROLE
        )
        root = None if refused_for is None else (refused_for.root or refused_for)
        failure = Failure(running.seq, role, cell, _summary(error), kinds, names, root)
        if root is None:
            self._failures.append(failure)
        for birth in replaced:
            self._replaced.setdefault(birth, failure)
        for name in names:
            self._stale_names.setdefault(name, failure)

    # What the library tells it.

    def made(self, thing: Any, kind: str, parents: Iterable[Any] = ()) -> None:
        """`thing` was just made, in the running cell, from `parents`."""
        if self.running is None:
            return
        births = tuple(b for b in map(self.birth, parents) if b is not None)
        birth = Birth(self.running.seq, kind, self.running.code.reads, births)
        key = id(thing)
        try:
            ref = weakref.ref(thing, functools.partial(self._forget, key))
        except TypeError:
            return  # not an object a notebook keeps (none of embedlab's are like this)
        self._births[key] = (ref, birth)
        self._last_made[kind] = self.running.seq

    def birth(self, thing: Any) -> Birth | None:
        entry = self._births.get(id(thing))
        return entry[1] if entry is not None and entry[0]() is thing else None

    def stale(self, things: Iterable[Any], namespace: Mapping[str, Any]) -> Stale | None:
        """Why a call on `things`, in the running cell, must be refused; None when it may run.

        Of the failures behind it, it names the most upstream one not yet put right (the
        parameters cell before the plan cell before the run cell), at that cell's latest
        failed execution; else a cell refused for it, not run since; else, every failure
        being put right, the cell that makes the stale object again."""
        causes: list[tuple[Failure, str, str | None]] = []
        if self.running is not None:
            for name in sorted(self.running.code.reads & self._stale_names.keys()):
                causes.append((self._stale_names[name], f"`{name}`", None))
        for thing in things:
            birth = self.birth(thing)
            if birth is not None:
                what = _called(thing, birth.kind, namespace)
                causes += [(failure, what, birth.kind) for failure in self._stale_by(birth)]
        if not causes:
            return None
        found = [(self._origin(f), f, what, kind) for f, what, kind in causes]
        standing = [(origin, what) for origin, _, what, _ in found if not self._put_right(origin)]
        refused = [(f, what) for _, f, what, _ in found if f.root is not None and not self._put_right(f)]
        if standing:
            origin, what = min(standing, key=_upstream_latest)
            stale, chain = Stale(origin, what), origin
        elif refused:
            failure, what = min(refused, key=_upstream_latest)
            stale, chain = Stale(failure, what, refused=self._origin(failure)), failure
        else:
            origin, _, what, kind = min(found, key=lambda c: c[0].seq)
            stale, chain = Stale(origin, what, rerun=ROLES.get(kind or "", OTHER_ROLE)), origin
        if self.running is not None:
            self.running.refused_for = chain  # if this cell ends refused, its failure passes this on
        return stale

    def _origin(self, failure: Failure) -> Failure:
        """The failure that `failure` comes down to: the one it was refused for, or itself; and
        of that cell, the latest failed execution (the same role, setting the same things)."""
        origin = failure.root or failure
        for later in reversed(self._failures):
            if later.seq <= origin.seq:
                break
            if later.role == origin.role and (later.kinds & origin.kinds or later.names & origin.names):
                return later
        return origin

    def _put_right(self, failure: Failure) -> bool:
        """Whether, since `failure`, cells that succeeded set its values and made again what it
        would have replaced (what was made before it stays stale all the same)."""
        return not failure.names & self._stale_names.keys() and all(
            self._last_made.get(kind, 0) > failure.seq for kind in failure.kinds
        )

    def _stale_by(self, birth: Birth) -> list[Failure]:
        """The failures that left `birth`, or anything it was made from, stale."""
        causes = []
        for b in birth.lineage():
            if b in self._replaced:
                causes.append(self._replaced[b])
            # Made from a value a failed parameters cell would have changed (and still has not).
            causes += [self._stale_names[n] for n in b.reads & self._stale_names.keys()]
        return causes

    def _held(self, names: Iterable[str], namespace: Mapping[str, Any]) -> list[Birth]:
        births = (self.birth(namespace[n]) for n in names if n in namespace)
        return [b for b in births if b is not None]

    def _forget(self, key: int, ref: weakref.ref[Any]) -> None:
        entry = self._births.get(key)
        if entry is not None and entry[0] is ref:
            del self._births[key]


def _upstream_latest(cause: tuple[Failure, str]) -> tuple[int, int]:
    return _UPSTREAM.index(cause[0].role), -cause[0].seq


def _summary(error: BaseException) -> str:
    if isinstance(error, SyntaxError) and error.msg:
        return f"{type(error).__name__}: {error.msg} (line {error.lineno})"  # not the cell's temp file name
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _called(thing: Any, kind: str, namespace: Mapping[str, Any]) -> str:
    """What people call `thing`: the notebook name bound to it, else its kind."""
    name = next((n for n, v in namespace.items() if v is thing and not n.startswith("_")), None)
    return f"`{name}`" if name is not None else f"this {kind}"
