"""A notebook cell never shows what an earlier run left, and refuses nothing else.

Run All in JupyterLab sends every cell at once. ipykernel aborts the requests already
queued when one fails, but executes those that arrive after its queue drained, so under
load the cells below a failed plan cell ran and showed the verdict, tables and figures
of the *previous* Run All (`plan` and `result` were still bound to it). Papermill runs
cells one at a time and stops at the first error, so only people were misled.

So each plan, result, deployment, explorer, burst, sweep and battery a notebook makes is
recorded with the cell execution that made it, the objects it was made from, and the
names that cell read. It is **stale** once a cell that would have replaced it failed:

- a failed cell that assigns (or would have assigned) a name bound to it, before or after
  the cell ran: the plan cell `plan = ScenarioPlan.from_params(...)`, the run cell
  `result = run_scenario(plan)`, the Start cell `dep = start_deployment(plan)`;
- a failed parameters cell (every statement a plain `name = value`) that sets a name the
  cell making it read, until a cell that succeeds sets that name again;
- or it was made from a stale object (a result from a stale plan, an explorer from a
  stale deployment).

Every notebook-facing call (`guarded`, `check_fresh`) refuses a stale argument with
`EarlierCellFailedError`, and so does a call in a cell that reads a name a failed
parameters cell left behind. A failure anywhere else (a typo, one's own code, a figure
that broke) makes nothing stale. A refused cell passes on the failure it was refused for,
so every refusal down a Run All names the same cell: by its role and its latest failed
execution ("the plan cell (In [3]) failed (ConfigError: ...)"), the one furthest up the
notebook where several failed, and with what to do: fix that cell and run it again; run
a refused cell again once what it was refused for is put right; or, once every failure
is put right, run again the cell that makes the stale object. A failed verdict
(`CheckFailedError`) is a verdict on this run, not a broken run. Once a cell that
succeeds makes the object again, the new one is fresh.

The rule is all in `Ledger` (no IPython in it). The shell's `pre_run_cell` and
`post_run_cell` events feed it: `load_ipython_extension` registers them, and the first
guarded call in a shell does so itself if nothing did. Outside IPython nothing is
recorded and nothing refuses.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from .errors import CheckFailedError, EarlierCellFailedError

__all__ = [
    "CellCode",
    "Ledger",
    "check_fresh",
    "guarded",
    "load_ipython_extension",
    "made",
    "unload_ipython_extension",
]

P = ParamSpec("P")
R = TypeVar("R")

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

# `name =` or `name: type =` at the start of a line, for a cell that does not parse.
_ASSIGNED_LINE = re.compile(r"([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")


# -- what a cell's code reads and sets ------------------------------------------------------------------


@dataclass(frozen=True)
class CellCode:
    """The names a cell's code reads before setting them, the names it sets, and whether it
    only sets values (`sets_values_only`: the shape of a parameters cell)."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    sets_values_only: bool = False

    @classmethod
    def of(cls, source: str) -> CellCode:
        """Read `source` (Python, magics already transformed); one that does not parse is read by line."""
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return cls._by_line(source)
        writes = frozenset(_bound_names(tree.body))
        loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        updated = {
            n.target.id
            for n in ast.walk(tree)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)
        }
        return cls(
            reads=frozenset((loads - writes) | updated),
            writes=writes,
            sets_values_only=bool(tree.body) and all(_sets_a_value(s) for s in tree.body) and bool(writes),
        )

    @classmethod
    def _by_line(cls, source: str) -> CellCode:
        """A cell Python cannot parse (it failed before running): the names its lines start assigning."""
        writes: set[str] = set()
        only_values = True
        for line in source.splitlines():
            if not line.strip() or line.lstrip().startswith("#") or line[0].isspace() or line[0] in ")]}":
                continue  # blank, a comment, or a continuation of the statement above
            match = _ASSIGNED_LINE.match(line)
            if match:
                writes.add(match.group(1))
            else:
                only_values = False
        return cls(writes=frozenset(writes), sets_values_only=only_values and bool(writes))


def _bound_names(body: Iterable[ast.stmt]) -> Iterator[str]:
    """The names a module-level block binds (not those bound inside its functions or classes)."""
    for node in _module_scope(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    yield alias.asname or alias.name.split(".")[0]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            yield node.name
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node.rest


def _module_scope(body: Iterable[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of `body` that runs in the module's scope: the bodies of defs, classes,
    lambdas and comprehensions are left out (their defs and classes themselves are not)."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _sets_a_value(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assign):
        return all(_plain_target(t) for t in statement.targets)
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and statement.value is not None
    # A docstring or a bare `...` sets nothing but does nothing either.
    return isinstance(statement, ast.Pass) or (
        isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
    )


def _plain_target(target: ast.expr) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_plain_target(t) for t in target.elts)
    return isinstance(target, ast.Name)


# -- the ledger: births, failures, and the rule ---------------------------------------------------------


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
            ref = weakref.ref(thing, lambda r, key=key: self._forget(key, r))
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


# -- the library's side: check, record ------------------------------------------------------------------


def check_fresh(*things: Any) -> None:
    """Raise `EarlierCellFailedError` if any of `things` is stale, or this cell reads a name a
    failed parameters cell left; in a notebook only."""
    found = _active()
    if found is None:
        return
    shell, ledger = found
    stale = ledger.stale([t for t in things if t is not None], shell.user_ns)
    if stale is not None:
        raise stale.error()


def made(thing: R, kind: str, *, parents: Iterable[Any] = ()) -> R:
    """Record that this cell made `thing` (a `kind` of `ROLES`) from `parents`; returns `thing`."""
    found = _active()
    if found is not None:
        found[1].made(thing, kind, parents)
    return thing


def guarded(makes: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A notebook-facing call: it refuses stale arguments (`check_fresh`), and what it returns
    is recorded as a `makes`, made from the guarded objects it was given."""

    def wrap(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            found = _active()
            if found is None:
                return function(*args, **kwargs)
            shell, ledger = found
            given = [*args, *kwargs.values()]
            stale = ledger.stale(given, shell.user_ns)
            if stale is not None:
                raise stale.error()
            result = function(*args, **kwargs)
            if makes is not None and result is not None:
                ledger.made(result, makes, [g for g in given if ledger.birth(g) is not None])
            return result

        return call

    return wrap


# -- the IPython side ------------------------------------------------------------------------------------

# shell -> its ledger and the two hooks that feed it (weak: a cleared shell goes with its ledger).
_FOLLOWED: weakref.WeakKeyDictionary[Any, tuple[Ledger, Callable[[Any], None], Callable[[Any], None]]] = (
    weakref.WeakKeyDictionary()
)


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext embedlab.cellguard`: follow this shell's cells. Loading it twice is harmless."""
    if shell in _FOLLOWED:
        return
    ledger = Ledger()
    following = weakref.ref(shell)  # the hooks must not keep the shell alive through _FOLLOWED

    def pre_run_cell(info: Any) -> None:
        shell = following()
        if shell is not None:
            ledger.begin(_source(info), shell.user_ns)

    def post_run_cell(result: Any) -> None:
        shell = following()
        if shell is None or result is None:  # result None: the kernel's own coroutine failed, no cell ran
            ledger.running = None
            return
        if ledger.running is None:
            ledger.begin(_source(result.info), shell.user_ns)
        error = result.error_before_exec or result.error_in_exec
        ledger.end(cell=f"In [{result.execution_count}]", error=error, namespace=shell.user_ns)

    shell.events.register("pre_run_cell", pre_run_cell)
    shell.events.register("post_run_cell", post_run_cell)
    _FOLLOWED[shell] = (ledger, pre_run_cell, post_run_cell)


def unload_ipython_extension(shell: Any) -> None:
    """Stop following this shell's cells, and forget what was recorded."""
    followed = _FOLLOWED.pop(shell, None)
    if followed is not None:
        shell.events.unregister("pre_run_cell", followed[1])
        shell.events.unregister("post_run_cell", followed[2])


def _active() -> tuple[Any, Ledger] | None:
    """The shell and its ledger while a cell runs; None outside IPython or between cells."""
    shell = _shell()
    if shell is None:
        return None
    if shell not in _FOLLOWED:
        load_ipython_extension(
            shell
        )  # this very cell's end is seen: the shell triggers every hook it has then
    ledger = _FOLLOWED[shell][0]
    if ledger.running is None:
        # The cell that loaded it (its start was before the hooks), or one the shell runs silently.
        current = getattr(getattr(shell, "displayhook", None), "exec_result", None)
        if current is None:
            return None
        ledger.begin(_source(current.info), shell.user_ns)
    return shell, ledger


def _shell() -> Any:
    """The running IPython shell, if this process is one; never imports IPython itself."""
    module = sys.modules.get("IPython")
    get = getattr(module, "get_ipython", None)
    return get() if get is not None else None


def _source(info: Any) -> str:
    return getattr(info, "transformed_cell", None) or getattr(info, "raw_cell", None) or ""
