"""Keep tokens out of everything the suite writes: results, logs, env.json, published pages."""

import os
import re
from pathlib import Path

from bench.files import write_whole

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH", re.I)
TOKEN_SHAPES = re.compile(r"\bhf_[A-Za-z0-9]{16,}\b|\bgh[pousr]_[A-Za-z0-9]{20,}\b|\bsk-[A-Za-z0-9_-]{20,}\b")
REDACTED = "***"


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= 6}
    return sorted(values, key=len, reverse=True)


def redact_file(path: Path) -> None:
    """Rewrite a file with secrets masked (logs are written by processes the suite does not control)."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    cleaned = redact(text)
    if cleaned != text:
        write_whole(path, cleaned)


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    for value in secret_values(environ):
        text = text.replace(value, REDACTED)
    return TOKEN_SHAPES.sub(REDACTED, text)
