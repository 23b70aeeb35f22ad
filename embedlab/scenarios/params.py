"""A scenario's own knobs: one frozen dataclass per scenario, each knob with its type and default.

    @dataclass(frozen=True, kw_only=True)
    class FailoverParams(BusyKnobs):      # scenarios/builtin/resilience.py, beside failover()
        requests: int = knob(200, "requests in the burst", min=2)
        kill_after: int = knob(50, "the victim is SIGKILLed after this many responses", min=1)

    FAILOVER = Scenario(name="failover", run=run_failover, params=FailoverParams, launches=True)

From that one class come the scenario's `embedlab scenario NAME` options (`kill_after`
becomes `--kill-after`, type-checked), the keys a matrix and a notebook's parameters cell
accept for it, its `--help`, and the keywords its function takes
(`failover(dep, kill_after=20)` or `failover(dep, params=FailoverParams(kill_after=20))`,
through `with_knobs`). `params_of(cls, values)` builds an instance from plain values (a
notebook's, a matrix's, the CLI's), checking each against its type: a mistake is a
`ConfigError` that names the knob. The plan's own fields (`ScenarioPlan`) are knobs too,
and their options come the same way.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ConfigError

P = TypeVar("P")
T = TypeVar("T")

__all__ = [
    "Knob",
    "NoParams",
    "check_params_class",
    "describe_params",
    "knob",
    "knobs",
    "params_from",
    "params_of",
    "with_knobs",
]


def knob(
    default: T,
    help: str,
    *,
    min: float | None = None,
    positive: bool = False,
    choices: Callable[[], Sequence[str]] | Sequence[str] | None = None,
    each: bool = False,
    secret: bool = False,
) -> T:
    """A field of a params class: its default, its help text, and a lower bound if it has one.
    Typed by its default, so that a default of the wrong type fails the type checker.

    `positive`: above 0. `choices`: the values it takes (or a function listing them, for a
    registry read when the options are made). `each`: a tuple given one item per option,
    repeated (`--worker-args A --worker-args B`, also spelled `--worker-arg`), for items
    that may hold a comma. `secret`: a credential, left out of the class's repr (and so of
    a notebook's output)."""
    if isinstance(default, (list, dict, set)):
        raise ConfigError(f"a knob's default must be immutable (a tuple, not a {type(default).__name__})")
    metadata = {
        "help": help,
        "min": min,
        "positive": positive,
        "choices": choices,
        "each": each,
        "secret": secret,
    }
    return dataclasses.field(default=default, metadata=metadata, repr=not secret)


@dataclass(frozen=True, kw_only=True)
class NoParams:
    """A scenario without knobs of its own."""


@dataclass(frozen=True)
class Knob:
    """One knob as the CLI, matrices and `--help` see it."""

    name: str
    kind: Any  # the resolved type hint: int, float, str, bool, tuple[float, ...], X | None
    default: Any
    help: str
    min: float | None
    positive: bool = False
    choices: Callable[[], Sequence[str]] | Sequence[str] | None = None
    each: bool = False
    secret: bool = False  # a credential: shown as *** wherever knobs are described

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def values(self) -> Sequence[str] | None:
        """The values it takes, where it names them."""
        return self.choices() if callable(self.choices) else self.choices

    @property
    def optional(self) -> bool:
        return _is_optional(self.kind)

    @property
    def base(self) -> Any:
        """The type without `| None`."""
        args = [a for a in typing.get_args(self.kind) if a is not type(None)]
        return args[0] if self.optional and len(args) == 1 else self.kind

    @property
    def item(self) -> Any | None:
        """The element type of a tuple knob (`tuple[float, ...]`), else None."""
        if typing.get_origin(self.base) is tuple:
            return typing.get_args(self.base)[0]
        return None

    def check(self, value: Any, *, scenario: str) -> Any:
        """`value` as this knob holds it (a list becomes a tuple, an int a float), or a ConfigError."""
        if value is None and self.optional:
            return None
        item = self.item
        if item is not None:
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, (list, tuple)):
                raise self._wrong(value, scenario)
            return tuple(self._scalar(v, item, scenario) for v in value)
        return self._scalar(value, self.base, scenario)

    def _scalar(self, value: Any, kind: Any, scenario: str) -> Any:
        if kind is bool:
            if not isinstance(value, bool):
                raise self._wrong(value, scenario)
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        elif kind is float and isinstance(value, str):
            value = self._parsed(value, float, scenario)
        elif kind is int and isinstance(value, str):
            value = self._parsed(value, int, scenario)
        if kind in (int, float, str) and (type(value) is not kind):
            raise self._wrong(value, scenario)
        if self.min is not None and isinstance(value, (int, float)) and value < self.min:
            raise ConfigError(f"{scenario}: {self.name} must be at least {self.min:g}, got {value!r}")
        if self.positive and isinstance(value, (int, float)) and value <= 0:
            raise ConfigError(f"{scenario}: {self.name} must be positive, got {value!r}")
        allowed = self.values()
        if allowed is not None and value not in allowed:
            raise ConfigError(
                f"{scenario}: {self.name} must be one of {', '.join(map(str, allowed))}, got {value!r}"
            )
        return value

    def _parsed(self, text: str, kind: type, scenario: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise self._wrong(text, scenario) from None

    def _wrong(self, value: Any, scenario: str) -> ConfigError:
        return ConfigError(f"{scenario}: {self.name} must be {_type_name(self.kind)}, got {value!r}")


def knobs(cls: type) -> list[Knob]:
    """The knobs of a params class, in declaration order: its own first, then those it takes from
    a shared base (the busy knobs), so that a scenario's options, notebook cell and errors lead
    with what is its own."""
    hints = typing.get_type_hints(cls)
    own = vars(cls).get("__annotations__", {})
    ordered = sorted(dataclasses.fields(cls), key=lambda f: f.name not in own)
    return [
        Knob(
            name=f.name,
            kind=hints[f.name],
            default=f.default,
            help=f.metadata.get("help", ""),
            min=f.metadata.get("min"),
            positive=f.metadata.get("positive", False),
            choices=f.metadata.get("choices"),
            each=f.metadata.get("each", False),
            secret=f.metadata.get("secret", False),
        )
        for f in ordered
    ]


def params_of(cls: type, values: Mapping[str, Any], *, scenario: str) -> Any:
    """An instance of `cls` from plain values; an unknown or badly typed knob is a ConfigError."""
    known = {k.name: k for k in knobs(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        takes = ", ".join(known) or "none"
        raise ConfigError(f"{scenario} has no knob {', '.join(unknown)}; its knobs: {takes}")
    return cls(**{name: known[name].check(value, scenario=scenario) for name, value in values.items()})


def params_from(cls: type, given: Any, *, scenario: str) -> Any:
    """An instance of `cls` from what a plan was given: None (the defaults), a mapping, or an instance."""
    if given is None:
        return cls()
    if isinstance(given, cls):
        return given
    if isinstance(given, Mapping):
        return params_of(cls, given, scenario=scenario)
    raise ConfigError(f"{scenario} takes {cls.__name__} or a mapping of its knobs, not {given!r}")


def with_knobs(cls: type[P], params: P | None, given: Mapping[str, Any], *, scenario: str) -> P:
    """`params` (else the defaults) with the knobs `given` as keywords: how a scenario's
    function takes both `params=` and `requests=40`, each knob declared once, in `cls`."""
    if params is not None and not isinstance(params, cls):
        raise ConfigError(f"{scenario} takes {cls.__name__} as params, not {params!r}")
    if not given:
        return params if params is not None else cls()
    base = {} if params is None else {k.name: getattr(params, k.name) for k in knobs(cls)}
    made: P = params_of(cls, {**base, **given}, scenario=scenario)
    return made


def check_params_class(cls: Any, *, scenario: str) -> None:
    """Refuse, when a scenario registers, a params class the CLI and matrices could not read."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ConfigError(f"scenario {scenario!r}: params must be a dataclass, got {cls!r}")
    # dataclasses has no public way to ask whether a class is frozen; typeshed leaves this out.
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise ConfigError(f"scenario {scenario!r}: params class {cls.__name__} must be frozen")
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING:
            raise ConfigError(f"scenario {scenario!r}: knob {f.name} of {cls.__name__} needs a default")
    for k in knobs(cls):
        kinds = (k.item,) if k.item is not None else (k.base,)
        if not all(t in (int, float, str, bool) for t in kinds):
            raise ConfigError(
                f"scenario {scenario!r}: knob {k.name} is {_type_name(k.kind)}; knobs are int, float, str, "
                "bool, a tuple of one of those, or one of these | None"
            )


def _is_optional(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in typing.get_args(kind)


def _type_name(kind: Any) -> str:
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
    if kind in names:
        return names[kind]
    if _is_optional(kind):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        return " or ".join(_type_name(a) for a in inner) + " or None"
    if typing.get_origin(kind) is tuple:
        return f"a list of {_type_name(typing.get_args(kind)[0]).removeprefix('a ')}s"
    return getattr(kind, "__name__", str(kind))


def describe_params(params: Any) -> str:
    """The knobs in a line for people: the class's own `describe()` where it has one."""
    own = getattr(params, "describe", None)
    if callable(own):
        return str(own())
    shown = [
        f"{k.name.replace('_', ' ')} {'***' if k.secret else _shown(getattr(params, k.name))}"
        for k in knobs(type(params))
    ]
    return ", ".join(shown) or "no knobs of its own"


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return "/".join(_shown(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)
