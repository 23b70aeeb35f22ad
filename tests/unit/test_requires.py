"""A missing tool fails its test, naming it, unless skipping it was asked for by name."""

from __future__ import annotations

import pytest

from ..requires import ALLOW_ENV, missing


def test_a_missing_tool_fails_naming_it_and_the_way_to_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(
        pytest.fail.Exception, match=r"haproxy is missing .* `EMBEDLAB_ALLOW_MISSING=haproxy`"
    ):
        missing("haproxy", "haproxy is missing")
    monkeypatch.setenv(ALLOW_ENV, "nginx")  # another tool allowed: still a failure
    with pytest.raises(pytest.fail.Exception):
        missing("haproxy", "haproxy is missing")
    monkeypatch.setenv(ALLOW_ENV, "nginx, haproxy")
    with pytest.raises(pytest.skip.Exception, match="EMBEDLAB_ALLOW_MISSING allows it"):
        missing("haproxy", "haproxy is missing")
