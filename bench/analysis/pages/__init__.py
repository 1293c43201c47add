"""Report pages: `report.html`, `plan.html` and `compare.html`, one self-contained file each.

One module per page (report_page, plan_page, compare_page, which writes compare.md too); the HTML
they are made of is bench/analysis/markup.py, their charts bench/analysis/charts.py.

`bench report`, `bench plan` and `bench compare` write a page beside their Markdown (`--no-html` to
skip), built from the same dictionaries as the Markdown and the JSON (summary.json, plan.json,
compare.json) plus the facts those leave out (the manifests, the baseline's runs, startup records).

Self-contained: styles inline, charts as SVG data URIs drawn by matplotlib (bench/analysis/charts.py), no
script, font, style sheet or image to fetch; the page's Content-Security-Policy forbids any, so
the browser refuses a stray reference instead of loading it. Without matplotlib, or with the
command's `--no-charts`, the page is still written, with tables only and a note.

Every figure a table shows carries `data-field`: the JSON path (a list of keys) of the value in
the page's JSON file, so a reader, and the tests, can check the page against it. Missing data is
worded ("not measured", "no baseline"), never shown as zero, `None` or `nan`; an interval with an
open end reads "at least 3.20x".
"""

from bench.analysis.markup import wins_words
from bench.analysis.pages.compare_page import compare_markdown, compare_page, write_compare
from bench.analysis.pages.plan_page import plan_page, plan_section, write_plan
from bench.analysis.pages.report_page import report_context, report_page, side_facts, verdict_state, write_report

__all__ = ["compare_markdown", "compare_page", "plan_page", "plan_section", "report_context", "report_page", "side_facts",
           "verdict_state", "wins_words", "write_compare", "write_plan", "write_report"]
