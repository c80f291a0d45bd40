"""Docstrings and comments in bench/ are a reference: they say what and why, briefly. Dates, issue numbers and "as
before" history belong in commit messages or docs/evidence/, and a docstring longer than MAX_LINES lines of text is a
page of docs in the wrong place. docs/estimator.md stays a reference under 40,000 bytes beside its generated tables."""

import ast
import inspect
import io
import re
import tokenize
from pathlib import Path

import pytest

from bench.paths import PACKAGE_DIR, PROJECT_ROOT

MAX_LINES = 10
HISTORY = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b[Ii]ssues? #?\d+\b|\bas before\b")
"""A date (YYYY-MM-DD), an issue number, or "as before": a story of how the code came to be, not what it is."""
PENDING: frozenset[str] = frozenset()
"""Files being rewritten elsewhere that still break a rule: each must break one (remove it once it is clean)."""
SOURCES = sorted(PACKAGE_DIR.rglob("*.py"))
ESTIMATOR_DOC_BYTES = 40_000


def _docstrings(tree: ast.AST):
    """(line, text) of every string statement: module, class and function docstrings and attribute docstrings."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for statement in body if isinstance(body, list) else []:
            value = getattr(statement, "value", None)
            if isinstance(statement, ast.Expr) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield statement.lineno, value.value


def offences(path: Path) -> list[str]:
    """Each docstring or comment of `path` that narrates history or runs past MAX_LINES, as `line: why`."""
    source = path.read_text(encoding="utf-8")
    found = []
    for line, text in _docstrings(ast.parse(source)):
        if (n := len(inspect.cleandoc(text).splitlines())) > MAX_LINES:
            found.append(f"{line}: docstring of {n} lines")
        found += [f"{line + text[: m.start()].count(chr(10))}: {m.group()!r}" for m in HISTORY.finditer(text)]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found += [f"{token.start[0]}: {m.group()!r} in a comment" for m in HISTORY.finditer(token.string)]
    return found


def test_history_and_length_are_caught(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""One line.\n\nMeasured on 2026-01-01 (issue 7)."""\n\n# works as before\nX = 1\n"""' + "l\n" * 11 + '"""\n'
    )
    assert sorted(offences(sample)) == [
        "3: '2026-01-01'",
        "3: 'issue 7'",
        "5: 'as before' in a comment",
        "7: docstring of 11 lines",
    ]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_docstrings_and_comments_are_reference(path: Path):
    name = path.relative_to(PACKAGE_DIR).as_posix()
    found = offences(path)
    if name in PENDING:
        assert found, f"bench/{name} keeps to the rules now: remove it from PENDING"
    else:
        assert found == [], f"bench/{name}: " + "; ".join(found)


def test_estimator_doc_is_a_reference():
    assert (PROJECT_ROOT / "docs" / "estimator.md").stat().st_size <= ESTIMATOR_DOC_BYTES
