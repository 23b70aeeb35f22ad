"""What a worker and its frontend agree on to register: the endpoint's name and the shared token.

A worker checks its `--endpoint` before it starts, the frontend each registration it
receives, by the one rule here; both read the registry token from the same variable.
"""

from __future__ import annotations

import os

from ..defaults import TOKEN_ENV
from ..errors import ConfigError

__all__ = ["token_from_env", "validate_endpoint"]


def validate_endpoint(endpoint: str) -> str:
    """`endpoint` if it names `namespace.component.endpoint` (Dynamo's form), else a ConfigError."""
    parts = endpoint.split(".")
    if len(parts) != 3 or not all(parts):
        raise ConfigError(f"endpoint must be 'namespace.component.endpoint', got {endpoint!r}")
    return endpoint


def token_from_env() -> str | None:
    """The registry's shared token (`$EMBEDLAB_TOKEN`), or None where it is open."""
    return os.environ.get(TOKEN_ENV) or None
