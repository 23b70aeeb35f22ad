"""docs/conformance.md has two generators: the matrix's (`embedlab conformance --markdown`) and
the sections that bench/render_docs.py appends; each rewrites its own part and keeps the other's."""

from __future__ import annotations

from pathlib import Path

from embedlab.reports.index import APPENDIX_MARKER, replace_appendix, write_conformance_markdown

MATRIX = {
    "started_at": "then",
    "stacks": ["embedded"],
    "checks": ["same-model"],
    "versions": {"embedded": "embedlab 0"},
    "cells": [{"stack": "embedded", "check": "same-model", "verdict": "passed", "text": "split 20/20"}],
}


def test_each_generator_keeps_the_others_part(tmp_path: Path) -> None:
    page = tmp_path / "conformance.md"
    write_conformance_markdown(page, MATRIX, command="embedlab conformance")
    assert APPENDIX_MARKER not in page.read_text()  # nothing appended yet: the matrix alone

    page.write_text(replace_appendix(page.read_text(), "## 16-replica split\n\nfirst"))
    page.write_text(replace_appendix(page.read_text(), "## 16-replica split\n\nsecond"))
    text = page.read_text()
    assert text.count(APPENDIX_MARKER) == 1 and "second" in text and "first" not in text
    assert "**PASSED** split 20/20" in text

    newer = {**MATRIX, "cells": [{**MATRIX["cells"][0], "text": "split 19/21"}]}  # type: ignore[dict-item]
    write_conformance_markdown(page, newer, command="embedlab conformance")
    text = page.read_text()
    assert "split 19/21" in text and "split 20/20" not in text
    assert text.endswith(f"{APPENDIX_MARKER}\n\n## 16-replica split\n\nsecond\n")
