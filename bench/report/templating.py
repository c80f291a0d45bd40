"""The Jinja environment of the site's templates (bench/report/templates/): autoescape on, an undefined name is an
error.

The page has no whitespace between its elements while the templates are written one element a line, indented: in
an `.html` template every line break is dropped together with the whitespace around it (`JoinLines`, before Jinja
parses the template), so a space that matters stands inside a line. `.css` and `.js` templates are taken as written.
"""

import re
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.ext import Extension

from bench.report.cells import VERDICT_BADGES

_LINE_BREAK = re.compile(r"[ \t]*\n\s*")


class JoinLines(Extension):
    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return _LINE_BREAK.sub("", source) if name is not None and name.endswith(".html") else source


ENV = Environment(
    loader=PackageLoader("bench.report", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    extensions=[JoinLines],
)
ENV.globals["verdict_badges"] = VERDICT_BADGES
"""The estimator's verdicts as text badges, for every template (bench/report/cells.py)."""


def render(template: str, **data: Any) -> str:
    return ENV.get_template(template).render(**data)


def call(template: str, macro: str, *args: Any) -> str:
    """One macro of `template` called with `args`: a fragment of the page."""
    return str(getattr(ENV.get_template(template).module, macro)(*args))
