"""Registries by name: built-ins, what users register at run time, and installed plugins.

    STACKS = Registry("stack", group="embedlab.stacks", builtins={"embedded": "embedlab.stacks.embedded:EmbeddedStack"})
    STACKS.register("mine", MyStack)          # or "my_package.module:MyStack"
    STACKS.get("mine"), STACKS.names()

A built-in is a "module:attribute" string, imported on first use, so listing names (for
`--help` or a check of a matrix) imports nothing heavy. Installed packages add theirs
through an entry-point group, as pytest and papermill plugins do: the entry point's name
is the registered name, its value what it registers. Modules named in `EMBEDLAB_PLUGINS`
(comma-separated; `embedlab --plugin MODULE` adds to it) are imported before any registry
first answers, in every process, and register what they define as they are imported:
plugins without packaging. The processes embedlab starts run in Python's safe-path mode
(`child_env`), so the folder they run in is not on their path: a plugin there is named by
its file (`EMBEDLAB_PLUGINS=my_scenario.py`), which they are given by absolute path.

A registry may check what joins it (`check(name, loaded)`, as pluggy holds a plugin
against its hook specs): a class given at run time is checked when it is registered, a
"module:attribute" string or an entry point when it is first loaded, and a wrong one is a
`ConfigError` that names it, before anything uses it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

from .defaults import PLUGINS_ENV, SAFE_PATH_ENV
from .errors import ConfigError

__all__ = ["Registry", "child_env", "load_plugins", "plugin_modules", "resolve"]

_IMPORTED: set[str] = set()

T = TypeVar("T")


def plugin_modules(env: Mapping[str, str] = os.environ) -> list[str]:
    """The modules `EMBEDLAB_PLUGINS` names, in order."""
    return [m.strip() for m in env.get(PLUGINS_ENV, "").split(",") if m.strip()]


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a Python process embedlab starts, which imports embedlab and its plugins and
    nothing from the folder it runs in.

    `python -m` puts the current folder first on `sys.path`: a stray `json.py`, `attr.py` or
    `http.py` where the user works would be imported by every worker in place of the
    standard library's, and each would fail to start. Safe-path mode (`PYTHONSAFEPATH`,
    Python's -P) keeps the folder off the path; set in the environment, it also reaches
    what those processes start in turn (a worker's ingest processes, vLLM's engine, a
    router's own Python). What the folder would give is named explicitly instead: each
    plugin file of `EMBEDLAB_PLUGINS` by its absolute path, and embedlab's own checkout in
    `PYTHONPATH` when this process found it only by running there.
    """
    out = {**env, SAFE_PATH_ENV: "1"}
    named = plugin_modules(env)
    if named:
        out[PLUGINS_ENV] = ",".join(str(Path(m).resolve()) if m.endswith(".py") else m for m in named)
    root = str(Path(__file__).resolve().parents[1])
    try:
        here = str(Path.cwd().resolve())
    except OSError:  # the folder was deleted under us: nothing is found through it
        here = None
    path = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here == root and root not in path:
        out["PYTHONPATH"] = os.pathsep.join([root, *path])
    return out


def load_plugins(modules: Sequence[str] | None = None) -> None:
    """Import each plugin once (default: those `EMBEDLAB_PLUGINS` names): a module name, or
    the path of a `.py` file (imported under its stem, so a worker or a kernel started
    elsewhere finds it by the same path).

    A plugin that cannot be imported is a `ConfigError` naming it: a misspelt plugin must
    not leave its scenarios silently unknown.
    """
    for module in plugin_modules() if modules is None else modules:
        if module in _IMPORTED:
            continue
        _IMPORTED.add(module)
        try:
            _import(module)
        except (ImportError, OSError) as exc:
            _IMPORTED.discard(module)
            raise ConfigError(
                f"cannot import plugin {module!r} ({PLUGINS_ENV}): {exc}{_hint(module)}"
            ) from exc


def _hint(module: str) -> str:
    """For a module that lies in the current folder, which safe-path mode keeps off `sys.path`."""
    local = Path(*module.split(".")).with_suffix(".py")
    if not sys.flags.safe_path or module.endswith(".py") or not local.is_file():
        return ""
    return f"; the folder it lies in is not on this process's path: name the file, {PLUGINS_ENV}={local.resolve()}"


def _import(module: str) -> None:
    if not module.endswith(".py"):
        importlib.import_module(module)
        return
    path = Path(module).resolve()
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"no Python file at {path}")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = loaded  # its dataclasses and pickles find their module by name
    spec.loader.exec_module(loaded)


def _a(kind: str) -> str:
    """`a stack`, `an engine`."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def resolve(target: str) -> Any:
    """Import `module:attribute` (whatever it is: the caller checks it)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Registry(Generic[T]):
    """Name -> T. Unknown names are a `ConfigError` that lists the known ones."""

    def __init__(
        self,
        kind: str,
        *,
        group: str,
        builtins: Mapping[str, T | str],
        adapt: Callable[[str, object], T] | None = None,
        check: Callable[[str, T], None] | None = None,
    ) -> None:
        """`adapt(name, loaded)` turns what a string or an entry point loads into a T;
        `check(name, value)` raises `ConfigError` for one that cannot work."""
        self.kind = kind
        self.group = group
        self._entries: dict[str, T | str] = dict(builtins)
        self._adapt = adapt
        self._check = check
        self._plugins_loaded = False
        self._from_plugins: set[str] = set()

    def register(self, name: str, target: T | str, *, replace: bool = False) -> None:
        """Add `name`. Registering a name twice is an error unless `replace`."""
        if not name or not isinstance(name, str):
            raise ConfigError(f"{_a(self.kind)} needs a name, got {name!r}")
        self._load_plugins()
        # A plugin's module may register its own entry when it is imported: that is no clash.
        if name in self._entries and not replace and name not in self._from_plugins:
            raise ConfigError(
                f"{_a(self.kind)} named {name!r} is already registered (pass replace=True to replace it)"
            )
        if self._check is not None and not isinstance(target, str):
            self._check(name, target)
        self._from_plugins.discard(name)
        self._entries[name] = target

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        self._load_plugins()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        """The names, in order: `sorted(registry)`, `", ".join(registry)`."""
        return iter(self.names())

    def get(self, name: str) -> T:
        self._load_plugins()
        try:
            target = self._entries[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; choose from {', '.join(self._entries)}"
            ) from None
        if not isinstance(target, str):
            return target
        loaded = resolve(target)
        registered = self._entries[name]
        if not isinstance(registered, str):  # the import registered it, with its own options
            return registered
        value: T = self._adapt(name, loaded) if self._adapt else loaded
        if self._check is not None:
            self._check(name, value)
        self._entries[name] = value
        return value

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        load_plugins()
        for point in entry_points(group=self.group):
            # A plugin never shadows a built-in or a name registered at run time.
            if point.name not in self._entries:
                self._entries[point.name] = point.value
                self._from_plugins.add(point.name)
