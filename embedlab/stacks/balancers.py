"""What HAProxy and nginx share in front of embedlab's workers: one pool per model, config in the run dir.

A plain load balancer knows no models: the config the run writes holds one pool (an
HAProxy backend, an nginx upstream) per model, in the order the spec first names each
one, with that model's workers as its servers. What it answers itself (the model list,
the mistakes it catches before any worker sees them) is OpenAI JSON written into that
config, never a page of the balancer's own.

Settings a run may change come as `frontend_args` pairs (`--retries 0`), each stack
naming the ones it reads; anything else is a ConfigError before anything starts.

A balancer stack is a `Balancer` part (its Debian binary, its switches, its config folder)
combined with the standalone workers it fronts (`standalone.StandaloneWorkers`).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cluster.spec import DeploymentSpec
from ..cluster.stack import StackContext
from ..errors import ConfigError

__all__ = ["Balancer", "Pool", "error_json", "models_json", "pools_of"]

# Names that go into config files and map files as they are: no quoting, no escaping.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")


@dataclass(frozen=True)
class Pool:
    """One model's workers: an HAProxy backend or an nginx upstream."""

    name: str  # pool_0, pool_1, ... in the order the spec first names each model
    model: str
    workers: tuple[int, ...]


def pools_of(spec: DeploymentSpec) -> list[Pool]:
    models = list(dict.fromkeys(spec.models))
    return [
        Pool(f"pool_{k}", model, tuple(i for i, m in enumerate(spec.models) if m == model))
        for k, model in enumerate(models)
    ]


def models_json(spec: DeploymentSpec) -> str:
    """The OpenAI model list of the config's pools, as the balancer answers GET /v1/models."""
    data = [
        {"id": m, "object": "model", "owned_by": "embedlab", "created": 0} for m in dict.fromkeys(spec.models)
    ]
    return json.dumps({"object": "list", "data": data})


def error_json(message: str, *, type: str = "invalid_request_error", param: str | None, code: str) -> str:
    return json.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


@dataclass(frozen=True)
class Balancer:
    """A load balancer from Debian, for the stack named `stack`: its binary (found on PATH, sbin
    included, or where Debian puts it), the Debian package that has it, and the `frontend_args`
    switches it reads, each with its default."""

    stack: str
    binary: str
    deb: str
    switches: Mapping[str, str] = field(default_factory=dict)

    def program(self) -> str:
        for folder in ("/usr/sbin", "/usr/bin", "/usr/local/sbin"):
            path = Path(folder) / self.binary
            if path.exists():
                return str(path)
        raise ConfigError(
            f"the {self.stack} stack needs Debian's {self.deb}: `make test` and `make run` install it "
            f"(or apt-get install -y {self.deb})"
        )

    def version(self) -> str | None:
        """`haproxy -v` / `nginx -v`, first line: a Debian binary has no Python package to ask."""
        try:
            proc = subprocess.run([self.program(), "-v"], capture_output=True, text=True, timeout=10)
        except (ConfigError, OSError, subprocess.SubprocessError):
            return None
        line = (proc.stdout or proc.stderr).strip().splitlines()[:1]
        found = re.search(r"(\d+\.\d+\.\d+)", line[0]) if line else None
        return f"{self.stack} {found.group(1)}" if found else None

    def check(self, spec: DeploymentSpec) -> None:
        """Model names it can write into its config, and switches it reads."""
        for model in spec.models:
            if not MODEL_NAME.fullmatch(model):
                raise ConfigError(
                    f"the {self.stack} stack writes model names into its config: {model!r} may hold only "
                    "letters, digits and . _ : / @ + -"
                )
        self.settings(spec)

    def settings(self, spec: DeploymentSpec) -> dict[str, str]:
        """The switches, from `frontend_args` pairs over their defaults."""
        values = dict(self.switches)
        args = list(spec.frontend_args)
        while args:
            flag = args.pop(0)
            if flag not in self.switches or not args:
                known = ", ".join(f"{k} VALUE" for k in self.switches) or "none"
                raise ConfigError(f"the {self.stack} stack reads these frontend args: {known}; got {flag!r}")
            values[flag] = args.pop(0)
        return values

    def conf_dir(self, ctx: StackContext[Any]) -> Path:
        """Where the balancer's config, sockets and temp files live: under the run dir, nowhere else."""
        return ctx.run_dir / self.stack

    def make_conf_dir(self, ctx: StackContext[Any]) -> Path:
        path = ctx.scratch(self.conf_dir(ctx))
        path.mkdir(parents=True, exist_ok=True)
        return path
