"""The benchmarks page holds current figures, not a measurement log, and the changelog one line per
change (tests/test_docs.py runs these checks on the tree and on planted pages)."""

from __future__ import annotations

import re
from typing import List

NOTEBOOK_WORDS = r"\b(?:turns?|rounds?|baseline|landed)\b"


def benchmarks_page_problems(text: str) -> List[str]:
    """Why a benchmarks page is a lab notebook rather than a guide to current figures."""
    problems = [f"{len(text.splitlines())} lines (at most 200)"] if len(text.splitlines()) > 200 else []
    if "closing note" not in "\n".join(text.splitlines()[:6]):
        problems.append("its first lines do not say that measurement logs go in the work's closing note")
    for number, line in enumerate(text.splitlines(), 1):
        if re.search(NOTEBOOK_WORDS, line, re.I):
            problems.append(f"line {number} reads like a measurement log: {line.strip()[:60]}")
    return problems


def changelog_problems(text: str) -> List[str]:
    """Lines of a changelog that are not one line per change under ``## date`` / ``### kind``."""
    lines = text.splitlines()
    problems = [f"{len(lines)} lines (at most 120)"] if len(lines) > 120 else []
    dates = re.findall(r"^## (\d{4}-\d{2}-\d{2})$", text, re.M)
    if not dates or dates != sorted(dates, reverse=True):
        problems.append(f"dated sections not newest first: {dates}")
    start = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    for number, line in enumerate(lines[start:], start + 1):
        if line and not re.match(r"^(## \d{4}-\d{2}-\d{2}|### (Added|Changed|Deprecated|Removed|Fixed|Security)|- \S.*)$", line):
            problems.append(f"line {number} is neither a heading nor a one-line entry: {line[:60]}")
    return problems
