"""What a test needs that `make test` installs: missing, the test fails and names it.

Skipping instead takes an opt-in, by name: `EMBEDLAB_ALLOW_MISSING=haproxy,nginx` (the browser
and vLLM tests keep their own switches, EMBEDLAB_ALLOW_NO_BROWSER and EMBEDLAB_ALLOW_NO_VLLM).
A skip is then listed with its reason in the suite's summary (`-rs`), never silent.
"""

from __future__ import annotations

import os

import pytest

ALLOW_ENV = "EMBEDLAB_ALLOW_MISSING"


def missing(name: str, why: str) -> None:
    """`name` is missing (`why` says what and how to install it): fail, or skip where allowed."""
    allowed = {n.strip() for n in os.environ.get(ALLOW_ENV, "").split(",") if n.strip()}
    if name in allowed:
        pytest.skip(f"{why} ({ALLOW_ENV} allows it)", allow_module_level=True)
    pytest.fail(f"{why} (`make test` installs it; `{ALLOW_ENV}={name}` skips this on purpose)")
