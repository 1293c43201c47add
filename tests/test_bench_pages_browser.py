"""The report pages in a real browser: headless Chromium (tests/fixtures/browser.py).

Each page of tests/test_bench_pages.py's sweeps is opened from disk: no JavaScript error, console
error or failed load, no request leaving the file, every chart drawn; a full-page screenshot is
saved under build/screenshots/ (look at it). Then every figure the page shows with a `data-field`
is read back from the rendered DOM and compared with the JSON file beside the page, to the digits
shown, and the figures a reader needs first (the verdict, each scenario's peak and ratio, the plan's
replicas and costs, each compare cell) must be among them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.test_bench_pages import pages_of
from tests.test_bench_pages_figures import check_ratios_rebuild

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "build" / "screenshots"
NUMBER = re.compile(r"-?\$?(?P<n>[0-9][0-9,]*(?:\.(?P<d>[0-9]+))?)")


def lookup(data: Any, path: list[Any]) -> Any:
    for key in path:
        data = data[key]
    return data


def shown_number(text: str) -> tuple[float, int] | None:
    """(value, decimals shown) of the first number in a cell's text, None if it holds none."""
    m = NUMBER.search(text)
    if not m:
        return None
    return float(m["n"].replace(",", "")), len(m["d"] or "")


def check_against(view, data: dict[str, Any]) -> list[list[Any]]:
    """Every data-field element's text equals the JSON value to the shown precision; returns the paths."""
    paths = []
    for raw, text in view.fields:
        path = json.loads(raw)
        value = lookup(data, path)
        shown = shown_number(text)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert shown is not None, f"{path}: {value} shown as {text!r}"
            number, decimals = shown
            assert abs(number - value) <= 0.5 * 10 ** -decimals + 1e-9, f"{path}: page {text!r}, JSON {value}"
        else:
            assert shown is None, f"{path}: JSON has no number ({value!r}) but the page shows {text!r}"
        paths.append(path)
    return paths


def open_checked(page_browser, page: Path, name: str):
    view = page_browser.open(page, SHOTS / f"{re.sub('[^a-z0-9]+', '-', name)}.png")
    print(f"\n{name}: screenshot {view.screenshot} ({view.height} px tall)")
    assert view.problems == [], f"{name}: {view.problems}"
    assert view.screenshot.stat().st_size > 20_000
    return view


def test_every_page_opens_cleanly_and_its_numbers_are_the_json(made, page_browser):
    for name, (page, data_path) in pages_of(made).items():
        view = open_checked(page_browser, page, name)
        data = json.loads(data_path.read_text())
        paths = check_against(view, data)
        assert len(paths) >= 5, f"{name}: only {len(paths)} figures carry their JSON path"
        if name == "report":
            summary = data
            assert ["verdict", "min_ratio"] in paths and ["verdict", "threshold"] in paths
            state = summary["verdict"]["state"]  # the three-state verdict, as summary.json has it
            assert view.states == [f"{state} {state.upper()}"]
            for s in summary["scenarios"]:
                assert ["scenarios", s, "peak", "output_tok_s"] in paths
                assert ["scenarios", s, "slo_capacity_interval", "output_tok_s", 0] in paths
                # the verdict's interval, beside the two capacities per GPU it divides
                assert ["comparison", s, "slo_ratio_interval", 0] in paths
                assert ["comparison", s, "throughput_ratio"] in paths
            assert check_ratios_rebuild({tuple(json.loads(p)): t for p, t in view.fields}, summary) >= 1
            assert ["verdict", "fleet", "current"] in paths
            for i, run in enumerate(summary["runs"]):
                if run["valid"]:
                    assert ["runs", i, "output_tok_s"] in paths and ["runs", i, "ttft_p99_ms"] in paths
            assert ["plan", "configurations", 0, "replicas"] not in paths  # the plan's own page has those
        if name in ("plan", "report's plan"):
            # a known count, or (the grid alone) both ends of its range, each read back from the page
            assert (["configurations", 0, "replicas"] in paths or {("configurations", 0, "replicas_range", 0),
                    ("configurations", 0, "replicas_range", 1)} <= {tuple(p) for p in paths})
            assert ["current", "replicas"] in paths
            assert ["configurations", 0, "usd_month_on_demand"] in paths
        if name == "compare":
            cells = {tuple(p[:2]) for p in paths if p[0] == "cells" and p[2] == "output_tok_s"}
            assert len(cells) == len(data["cells"])
            assert data["slo_capacity_winner"], "both sweeps have a capacity: compare ranks them"
            for s, lead in data["slo_capacity_winner"].items():
                assert ["slo_capacity_winner", s, "ratio"] in paths


def test_a_wrong_number_on_the_page_is_caught(made, page_browser, tmp_path):
    """The comparison itself: one peak altered in the HTML is reported."""
    page = made["report"] / "report.html"
    summary = json.loads((made["report"] / "summary.json").read_text())
    peak = summary["scenarios"]["S1_chat"]["peak"]["output_tok_s"]
    html = page.read_text()
    shown = f"{peak:,.1f}"
    assert shown in html
    bad = tmp_path / "report.html"
    bad.write_text(html.replace(f">{shown}<", f">{peak * 1.1:,.1f}<", 1))
    view = page_browser.open(bad)
    with pytest.raises(AssertionError, match=f"page '{peak * 1.1:,.1f}', JSON {str(peak)[:6]}"):
        check_against(view, summary)


def test_the_browser_reports_a_stray_load_and_a_script_error(made, page_browser, tmp_path):
    html = (made["alone"] / "report.html").read_text()
    bad = tmp_path / "bad.html"
    bad.write_text(html.replace("</main>", '<img src="https://cdn.example/x.png"></main>'))
    assert any("x.png" in p for p in page_browser.open(bad).problems)
    # without the page's policy a script would run: its error is caught as well
    bad.write_text("<!DOCTYPE html><html><body><script>throw new Error('boom')</script></body></html>")
    assert any("boom" in p for p in page_browser.open(bad).problems)


def test_the_figures_page_shows_summary_json_and_ratios_rebuild(figures, page_browser):
    """The sweeps whose capacity is easy to get wrong (tests/test_bench_pages_figures.py), in Chromium:
    every tagged figure is summary.json's, every capacity and ratio of the answer is among them, and
    each ratio end shown equals the capacities per GPU shown beside it, from the rendered text."""
    view = open_checked(page_browser, figures["report"] / "report.html", "report figures")
    summary = json.loads((figures["report"] / "summary.json").read_text())
    paths = check_against(view, summary)
    for s in summary["scenarios"]:
        assert ["scenarios", s, "slo_capacity_interval", "output_tok_s", 0] in paths
        for who in ("candidate", "baseline"):
            assert ["comparison", s, "slo_capacity_per_gpu", who, 0] in paths
    shown = {tuple(json.loads(p)): t for p, t in view.fields}
    assert check_ratios_rebuild(shown, summary) >= 2 * len(summary["comparison"]) - 1
    # the answer first: the fleet sits inside the verdict box, above the ratio table
    text = " ".join(view.text.split())
    assert text.index("Today 12 replicas") < text.index("Ratio per scenario")
