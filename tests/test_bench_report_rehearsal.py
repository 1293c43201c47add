"""The rehearsal in the report: `bench report --rehearsal DIR` reads what `bench rehearse --out DIR`
wrote (fixture `made`, tests/fixtures/bench_pages.py: a burst on an idle pool, accounted by the
rehearsal's own code), computes its figures once into summary.json `rehearsal`, and report.md and
report.html show exactly those; without a rehearsal both say how to run one; a bad --rehearsal
exits 2 naming the flag. tests/test_bench_pages_browser.py reads the same page's figures in Chromium.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.analysis import report as REP
from bench.analysis import summary as S
from tests.test_bench_pages_figures import close, lookup, page_fields


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def _section(md: str) -> str:
    start = md.index("## Rehearsal")
    end = md.find("\n## ", start + 1)
    return md[start:end if end > 0 else None]


def _row(section: str, label: str) -> str:
    return next(line for line in section.splitlines() if line.startswith(f"| {label} |"))


def test_summary_json_holds_the_rehearsals_figures_computed_from_its_record(made):
    record = json.loads((made["rehearsal"] / S.REHEARSAL_FILE).read_text())
    r = _summary(made["report"])["rehearsal"]
    assert r["source"] == str(made["rehearsal"] / S.REHEARSAL_FILE)
    assert r["attainment_pct"] == pytest.approx(100 * 37 / 40, abs=0.01)
    assert r["requests"] == {"sent": 40, "answered": 39, "met": 37}
    # TTFT p99 612.5 ms misses the 500 ms limit; ITL p99 31.25 ms is within 50 ms
    assert (r["ttft_within_slo"], r["itl_within_slo"], r["held"]) == (False, True, False)
    hours = r["replica_hours"]
    assert (hours["autoscaled"], hours["planned"]) == (record["replica_hours"]["autoscaled"],
                                                       record["replica_hours"]["planned"])
    assert hours["share_of_plan_pct"] == pytest.approx(100 * hours["autoscaled"] / hours["planned"], abs=0.01)
    assert r["cost_usd"]["planned_on_demand"] == pytest.approx(hours["planned"] * 4.13, abs=1e-4)
    # the decisions are the reads where the rule's recommendation, the replicas asked for or those serving changed
    steps = record["autoscaler"]["steps"]
    changed = [s for i, s in enumerate(steps)
               if i == 0 or (s["recommended"], s["replicas"], s["ready"]) !=
               (steps[i - 1]["recommended"], steps[i - 1]["replicas"], steps[i - 1]["ready"])]
    assert [d["t"] for d in r["autoscaler"]["decisions"]] == [s["t"] for s in changed]
    assert 3 <= len(changed) < len(steps)
    # ceil(30 running / 8 per replica) = 4 asked for in the burst, serving only after the 60 s start-up
    burst = next(d for d in r["autoscaler"]["decisions"] if d["replicas"] == 4)
    assert burst["ready"] < 4 and burst["values"]["running"] == 30.0


def test_report_md_shows_summary_jsons_rehearsal_figures(made):
    r = _summary(made["report"])["rehearsal"]
    section = _section((made["report"] / "report.md").read_text())
    assert section.startswith("## Rehearsal: the interactive pool (seqs-16)")
    assert _row(section, "Source").endswith(f"| {r['source']} |")
    assert f"| {r['attainment_pct']:.1f}% ({r['requests']['met']} of {r['requests']['sent']} requests" \
        in _row(section, "SLO attainment")
    assert f"{r['ttft_p99_ms']:.1f} ms against the SLO's {r['slo']['ttft_p99_ms']:g} ms: over" in _row(section, "TTFT p99")
    assert f"{r['itl_p99_ms']:.1f} ms against the SLO's {r['slo']['itl_p99_ms']:g} ms: within" in _row(section, "ITL p99")
    assert _row(section, "Held the SLO") == "| Held the SLO | no: TTFT p99 over the SLO |"
    hours = r["replica_hours"]
    assert (f"{hours['autoscaled']:.4f} autoscaled against {hours['planned']:.4f}" in _row(section, "Replica-hours")
            and f"({hours['share_of_plan_pct']:.1f}% of it)" in _row(section, "Replica-hours"))
    cost = r["cost_usd"]
    assert (f"{cost['autoscaled_on_demand']:.4f} USD autoscaled against {cost['planned_on_demand']:.4f} USD"
            in _row(section, "Cost, on-demand"))
    assert f"{cost['autoscaled_spot']:.4f} USD autoscaled against {cost['planned_spot']:.4f} USD" in _row(section, "Cost, Spot")
    assert f"at most {r['autoscaler']['peak_replicas']} asked for" in _row(section, "Autoscaler (simulated)")
    table = [line for line in section.splitlines() if re.match(r"\| [0-9.]+ s \|", line)]
    assert len(table) == len(r["autoscaler"]["decisions"])
    for line, d in zip(table, r["autoscaler"]["decisions"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == f"{d['t']:.1f} s" and cells[1] == f"{d['values']['running']:.1f}"
        assert cells[4:] == [str(d["recommended"]), str(d["replicas"]), str(d["ready"])]
    assert "None" not in section and "nan" not in section


def test_report_html_shows_summary_jsons_rehearsal_figures(made):
    summary = _summary(made["report"])
    page = (made["report"] / "report.html").read_text()
    assert page.count('<section id="rehearsal">') == 1
    tagged = {}
    for raw, text in page_fields(made["report"] / "report.html"):
        path = json.loads(raw)
        if path[0] == "rehearsal":
            value = lookup(summary, path)
            assert close(value, text), f"{path}: page {text!r}, summary.json {value}"
            tagged[tuple(path[1:])] = text
    decisions = summary["rehearsal"]["autoscaler"]["decisions"]
    must = [("attainment_pct",), ("ttft_p99_ms",), ("itl_p99_ms",), ("request_rate",), ("planned_peak_req_s",),
            ("replica_hours", "autoscaled"), ("replica_hours", "planned"), ("replica_hours", "share_of_plan_pct"),
            ("cost_usd", "autoscaled_on_demand"), ("cost_usd", "planned_on_demand"), ("cost_usd", "autoscaled_spot"),
            ("cost_usd", "planned_spot"), ("autoscaler", "peak_replicas"), ("autoscaler", "short_s"),
            *[("autoscaler", "decisions", i, k) for i in range(len(decisions)) for k in ("t", "replicas", "ready")]]
    assert [m for m in must if m not in tagged] == []
    assert summary["rehearsal"]["source"] in page


def test_without_a_rehearsal_the_report_says_how_to_run_one(made):
    assert _summary(made["alone"])["rehearsal"] is None
    section = _section((made["alone"] / "report.md").read_text())
    assert section.startswith("## Rehearsal\n") and "No rehearsal was given to this report" in section
    assert "python -m bench rehearse --plan" in section and "--rehearsal DIR" in section
    page = (made["alone"] / "report.html").read_text()
    assert "No rehearsal was given to this report" in page
    assert not [p for p, _ in page_fields(made["alone"] / "report.html") if json.loads(p)[0] == "rehearsal"]


def _without_met(d: Path) -> dict:
    from tests.fixtures.bench_pages import write_rehearsal

    record = json.loads((write_rehearsal(d / "whole") / S.REHEARSAL_FILE).read_text())
    del record["requests"]["met"]
    return record


@pytest.mark.parametrize("make, says", [
    (lambda d: d / "nowhere", "no such file"),
    (lambda d: d, "no such file"),  # a folder without rehearsal.json
    (lambda d: (d / S.REHEARSAL_FILE).write_text("{not json") and d, "cannot be read"),
    (lambda d: (d / S.REHEARSAL_FILE).write_text(json.dumps({"pool": "interactive"})) and d,
     "is not a rehearsal record (it has no scenario, request_rate"),
    (lambda d: (d / S.REHEARSAL_FILE).write_text(json.dumps(_without_met(d))) and d,
     "is not a rehearsal record (it has no met)"),
    (lambda d: (d / S.REHEARSAL_FILE).write_text(json.dumps({**_without_met(d), "requests": [1]})) and d,
     "is not a rehearsal record (a field has the wrong type)"),
])
def test_a_bad_rehearsal_exits_2_naming_the_flag(made, tmp_path, capsys, make, says):
    given = make(tmp_path)
    rc = REP.main([str(made["cand"]), "--out", str(tmp_path / "out"), "--no-charts", "--rehearsal", str(given)])
    err = capsys.readouterr().err
    assert rc == 2 and "bench report: --rehearsal: " in err and says in err and "Traceback" not in err
    assert "bench rehearse --out" in err
    assert not (tmp_path / "out" / "report.md").exists()
