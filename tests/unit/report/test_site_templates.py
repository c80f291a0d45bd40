"""The site rendered through its Jinja templates (bench/report/templates/) for a small fixture: every part is there,
text from the records is escaped wherever it lands, and the templates' line breaks never reach the page."""

import dataclasses
from html.parser import HTMLParser

import pytest

from bench.cli import main
from bench.estimate.prediction_tables import write_predicted
from bench.report.site import ConfigFile, render_site
from bench.report.summary import summarize
from bench.report.templating import ENV
from bench.results.schema import ErrorClass, Status
from tests.unit.report.test_compare import rec
from tests.unit.report.test_publish import build_results, cell_ids, cpu_view

RAW = ("pre", "script", "style")
"""Elements whose text is shown (or run) as written: their line breaks are the page's own."""


class Page(HTMLParser):
    """Start tags with their attributes, the text outside RAW elements, and every piece of text inside them."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self.raw: list[tuple[str, str]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag != "meta":  # the only void element the page writes without a closing slash
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        raw = next((t for t in reversed(self.open) if t in RAW), None)
        if raw is None:
            self.text.append(data)
        else:
            self.raw.append((raw, data))

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    results, scenarios = build_results(tmp_path_factory.mktemp("site"))
    write_predicted("2xA10", results, "Current validation on measured cells: a line for the test.")
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    site = results / "site"
    return "".join((site / name).read_text(encoding="utf-8") for name in ("hw-2xA10.html", "hw-cpu.html"))


def test_every_part_of_the_page_for_the_fixture(page):
    """The two profiles' pages, one after the other: each a whole page, together every part."""
    pages = [p + "</html>\n" for p in page.split("</html>\n")[:-1]]
    assert len(pages) == 2
    for one in pages:
        assert one.startswith('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">')
        assert not Page(one).open  # every element closed, in order
    parsed = Page(page)
    assert [a["id"] for a in parsed.find("section", **{"class": "profile"})] == ["hw-2xA10", "hw-cpu"]
    for hardware in ("2xA10", "cpu"):
        for cell_id in cell_ids():
            (panel,) = parsed.find("details", id=f"cell-{hardware}-{cell_id}")
            assert panel["class"] == "panel" and panel["data-cell"] == cell_id
            (link,) = parsed.find("a", href=f"#cell-{hardware}-{cell_id}")
            assert link["data-cell"] == cell_id and (link["class"] or "").startswith("cell s-")
        assert parsed.find("div", **{"class": "profile-plots", "data-hardware": hardware})
    assert [a["class"] for a in parsed.find("svg")] == ["plot scatter", "plot winners"] * 2
    assert len([a for t, a in parsed.tags if t == "g" and (a.get("id") or "").startswith("point-")]) == 16
    badges = [a.get("class") for a in parsed.find("span") if (a.get("class") or "").startswith("badge")]
    assert badges[: len(Status)] == [f"badge s-{s.value}" for s in Status]
    predicted = parsed.find("section", id="predicted-2xA10")
    assert predicted and predicted[0]["class"] == "profile predicted"
    assert parsed.find("table", **{"class": "matrix predicted-matrix", "data-hardware": "2xA10"})
    text = "".join(parsed.text)
    assert "PREDICTED, not measured" in text and "Current validation on measured cells: a line for the test." in text
    assert "partial run" not in text  # both profiles picked a complete run
    styles = "".join(data for tag, data in parsed.raw if tag == "style")
    assert "body{font:14px/1.45 system-ui" in styles and ".s-learning_failed{" in styles and ".p-fits{" in styles
    scripts = "".join(data for tag, data in parsed.raw if tag == "script")
    assert "function openFromHash()" in scripts and "data-ready" in scripts


HOSTILE = """</pre><script>alert("x")</script> <b>&amp; 'q'</b>"""


def test_text_from_the_records_is_escaped_wherever_it_lands(tmp_path):
    view = cpu_view(tmp_path)
    cell_id = "one_adapter-none-zero2"
    failed = rec(cell_id, Status.ERROR, error_class=ErrorClass.CONFIG, message=f"message {HOSTILE}")
    failed = failed.model_copy(
        update={
            "known_issue": f"issue {HOSTILE}",
            "known_issue_note": f"note {HOSTILE}",
            "mismatches": [f"mismatch {HOSTILE}"],
            "log_tail": f"log {HOSTILE}",
        }
    )
    records = {**view.records, cell_id: failed}
    configs = {**view.configs, cell_id: [ConfigFile(f"configs/{HOSTILE}.json", f"config {HOSTILE}")]}
    view = dataclasses.replace(view, records=records, cells=summarize(records.values()), configs=configs)
    page = render_site([view], f"time {HOSTILE}")
    parsed = Page(page)
    assert len(parsed.find("script")) == 1 and not parsed.find("b")
    shown = "".join(parsed.text) + "".join(data for tag, data in parsed.raw if tag == "pre")
    for where in ("message", "issue", "note", "mismatch", "log", "config", "time"):
        assert f"{where} {HOSTILE}" in shown, where
    assert f"configs/{HOSTILE}.json" in shown


def test_the_templates_line_breaks_never_reach_the_page(page):
    page = page.split("</html>\n")[0] + "</html>\n"
    assert page.endswith("</html>\n") and all("\n" not in t for t in Page(page.removesuffix("\n")).text)
    outside = page
    for tag in RAW:  # what is left once the RAW elements' text is cut out: one line and the final line break
        parts = outside.split(f"<{tag}")
        outside = parts[0] + "".join(f"<{tag}" + p[p.index(f"</{tag}>") :] for p in parts[1:])
    assert outside.count("\n") == 1 and outside.endswith("</html>\n")


def test_autoescape_is_on_and_an_undefined_name_is_an_error():
    assert ENV.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"
    with pytest.raises(Exception, match="'missing' is undefined"):
        ENV.from_string("{{ missing }}").render()
