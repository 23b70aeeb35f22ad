"""A stack is checked when it joins the registry, not when a run first calls what it lacks.

pluggy holds every hook implementation against its spec at registration, argument names
included; this does the same for a stack class against `BaseStack` and the capability
protocols (`Drains`, `LiveWeights`, ...): it must subclass `BaseStack`, define the four
abstract methods, keep no state on its objects (a run's is what `prepare()` returns), take
the arguments the harness passes to each method it defines (by name, in order), define a
capability's methods all or none (`drain` with `resume`), and give reasons (`lacks`) only
for what it lacks. Each refusal is a `ConfigError` that names the stack and what is wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..errors import ConfigError
from .spec import DISCOVERY_BACKENDS
from .stack import CAPABILITIES, BaseStack

__all__ = ["check_stack_class"]

_KNOWN_LACKS = {*CAPABILITIES, "worker_servers", "prefix_aware"}


def _methods() -> dict[str, Callable[..., object]]:
    """What the harness may call on any stack, and on one with each capability: name -> its spec."""
    methods: dict[str, Callable[..., object]] = {
        name: value
        for name, value in vars(BaseStack).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }
    for protocol, _ in CAPABILITIES.values():
        methods.update({name: getattr(protocol, name) for name in _protocol_methods(protocol)})
    return methods


def _protocol_methods(protocol: type) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    ]


def _parameters(function: Callable[..., object]) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]


def _signature_mismatch(cls: type, method: str, spec: Callable[..., object]) -> str | None:
    """Why `cls.method` cannot take what the harness passes to it, or None where it can."""
    expected = _parameters(spec)
    try:
        got = _parameters(getattr(cls, method))
    except (TypeError, ValueError):
        return None  # a builtin or a C callable: nothing to read
    names = [p.name for p in got[: len(expected)]]
    wanted = [p.name for p in expected]
    extra = [p.name for p in got[len(expected) :] if p.default is inspect.Parameter.empty]
    if names != wanted or extra:
        return f"{method}({', '.join(p.name for p in got)}) should take ({', '.join(wanted)})"
    return None


def _defines(cls: type, method: str) -> bool:
    value = getattr(cls, method, None)
    return callable(value) and value is not getattr(BaseStack, method, None)


def check_stack_class(name: str, cls: object) -> None:
    """Refuse a class that cannot be a stack, with the stack's name and what is wrong."""
    if not (isinstance(cls, type) and issubclass(cls, BaseStack)):
        raise ConfigError(
            f"stack {name!r}: {cls!r} is not a subclass of embedlab.cluster.stack.BaseStack "
            "(subclass it and define frontend, worker, health_url and dispatchable_endpoints)"
        )
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise ConfigError(f"stack {name!r}: {cls.__qualname__} lacks {', '.join(missing)}")
    if not cls.name:
        raise ConfigError(f"stack {name!r}: {cls.__qualname__} sets no `name`")
    try:
        kept = sorted(vars(cls()))
    except TypeError as exc:
        raise ConfigError(f"stack {name!r}: {cls.__qualname__}() must take no arguments ({exc})") from exc
    if kept:
        raise ConfigError(
            f"stack {name!r}: {cls.__qualname__} keeps {', '.join(kept)} on the object; one object serves "
            "every run, so per-run state is the dataclass prepare() returns (StackContext.state)"
        )
    wrong = [
        why
        for method, spec in _methods().items()
        if _defines(cls, method) and (why := _signature_mismatch(cls, method, spec))
    ]
    if wrong:
        raise ConfigError(f"stack {name!r}: {cls.__qualname__}: {'; '.join(wrong)}")
    _check_capabilities(name, cls)
    unknown = [d for d in cls.discoveries if d not in DISCOVERY_BACKENDS]
    if unknown or not cls.discoveries:
        raise ConfigError(
            f"stack {name!r}: discoveries must be some of {', '.join(DISCOVERY_BACKENDS)}, got {cls.discoveries!r}"
        )
    if cls.default_policy is not None and cls.default_policy not in cls.policies:
        raise ConfigError(
            f"stack {name!r}: its default policy {cls.default_policy!r} is not among its policies"
        )
    if cls.prefix_aware_mode is not None and cls.prefix_aware_mode not in cls.policies:
        raise ConfigError(
            f"stack {name!r}: its prefix-aware policy {cls.prefix_aware_mode!r} is not among its policies"
        )
    if cls.prefix_aware_mode is not None and "prefix_aware" in cls.lacks:
        raise ConfigError(
            f"stack {name!r}: {cls.__qualname__} gives a reason it lacks a prefix-aware policy, yet names one"
        )
    if bool(cls.venv) != bool(cls.pins):
        raise ConfigError(
            f"stack {name!r}: a venv of its own is built from its pins; give both `venv` and `pins`, or neither"
        )


def _check_capabilities(name: str, cls: type[BaseStack]) -> None:
    """A capability's methods all or none; reasons only for what it lacks."""
    for capability, (protocol, _) in CAPABILITIES.items():
        methods = _protocol_methods(protocol)
        defined = [m for m in methods if _defines(cls, m)]
        if defined and len(defined) < len(methods):
            rest = [m for m in methods if m not in defined]
            raise ConfigError(
                f"stack {name!r}: {cls.__qualname__} defines {', '.join(defined)} but not {', '.join(rest)}: "
                f"a stack that is a {protocol.__name__} defines {', '.join(methods)}"
            )
        if capability in cls.lacks and defined:
            raise ConfigError(
                f"stack {name!r}: {cls.__qualname__} gives a reason it lacks {capability}, yet defines "
                f"{', '.join(methods)}"
            )
    unknown = sorted(set(cls.lacks) - _KNOWN_LACKS)
    if unknown:
        raise ConfigError(
            f"stack {name!r}: lacks names {', '.join(unknown)}; it keys reasons by {', '.join(sorted(_KNOWN_LACKS))}"
        )
