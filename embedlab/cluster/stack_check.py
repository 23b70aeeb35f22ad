"""A stack is checked when it joins the registry, not when a run first calls what it lacks.

pluggy holds every hook implementation against its spec at registration, argument names
included; this does the same for a stack class against `BaseStack`: it must subclass it,
define the four abstract methods, keep no state on its objects (a run's goes in
`StackContext.state`), take the arguments the harness passes to each method it overrides
(by name, in order), and declare only what it defines (`drains` with `drain`
and `resume`, `live_weights` with `set_weights`, `retries_switch` with `without_retries`,
`canaries` with `canary_env`, `pins` with a `venv`). Each refusal is a `ConfigError` that names the stack and what is wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..errors import ConfigError
from .spec import DISCOVERY_BACKENDS
from .stack import BaseStack

__all__ = ["check_stack_class"]

# Declared capability -> the methods a class that declares it must define itself.
_DECLARED = {
    "drains": ("drain", "resume"),
    "live_weights": ("set_weights",),
    "retries_switch": ("without_retries",),
    "canaries": ("canary_env",),
}


def _methods() -> list[str]:
    """BaseStack's public methods: what the harness may call on any stack."""
    return [
        name
        for name, value in vars(BaseStack).items()
        if not name.startswith("_") and inspect.isfunction(value)
    ]


def _parameters(function: Callable[..., object]) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]


def _signature_mismatch(cls: type, method: str) -> str | None:
    """Why `cls.method` cannot take what the harness passes to it, or None where it can."""
    expected = _parameters(getattr(BaseStack, method))
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
    return getattr(cls, method, None) is not getattr(BaseStack, method)


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
            "every run, so per-run state goes in StackContext.state (filled by prepare)"
        )
    wrong = [
        why for method in _methods() if _defines(cls, method) and (why := _signature_mismatch(cls, method))
    ]
    if wrong:
        raise ConfigError(f"stack {name!r}: {cls.__qualname__}: {'; '.join(wrong)}")
    for flag, methods in _DECLARED.items():
        declared, defined = bool(getattr(cls, flag)), all(_defines(cls, m) for m in methods)
        if declared and not defined:
            raise ConfigError(
                f"stack {name!r}: {cls.__qualname__} declares {flag} but does not define {', '.join(methods)}"
            )
        if defined and not declared:
            raise ConfigError(
                f"stack {name!r}: {cls.__qualname__} defines {', '.join(methods)} but does not declare {flag} = True"
            )
    unknown = [d for d in cls.discoveries if d not in DISCOVERY_BACKENDS]
    if unknown or not cls.discoveries:
        raise ConfigError(
            f"stack {name!r}: discoveries must be some of {', '.join(DISCOVERY_BACKENDS)}, got {cls.discoveries!r}"
        )
    if cls.default_policy is not None and cls.default_policy not in cls.policies:
        raise ConfigError(
            f"stack {name!r}: its default policy {cls.default_policy!r} is not among its policies"
        )
    if bool(cls.venv) != bool(cls.pins):
        raise ConfigError(
            f"stack {name!r}: a venv of its own is built from its pins; give both `venv` and `pins`, or neither"
        )
