"""`make demo`'s steps on the real vLLM CPU build, at reduced size: one scenario at 1/16 length, one
grid concurrency (c=2), `--max-num-seqs` 1 against 4. The demo builds the tiny model, starts and stops
each server, sweeps it with `--capacity-search`, then writes the report (verdict, plan) and the compare
page; the report page is opened in headless Chromium and its numbers compared with summary.json, and
what the demo printed is compared, line by line, with the shape of the README's demo output.
The full demo's timing is measured by tests/benchmarks/time_demo.py, not asserted here.

One grid point is enough for what is checked here: the capacity search goes on from it (c=4, c=8:
the baseline's bracket closes at c=8, the candidate's stays open), and a second grid point cost each
side a run of 12 to 18 s (with its warm-up, 20 s of the budget). The budget (51 s) leaves the search its
first run while the grid and that run take up to about 1.5 times what they took on a loaded 2-core
machine (20 + 13 s), the margin the former 1.25 minutes left two grid points (75 s for 36 + 13 s).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.analysis import compare as CMP
from bench.analysis import pages
from tests.test_bench_demo import demo_output_shape, readme_demo_block
from tests.test_bench_pages import external_references
from tests.test_bench_pages_browser import check_against, open_checked

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]


# The session's tiny server is asked for only for what its start leaves behind: the model-class inspection in the
# session's cache root (tests/fixtures/vllm_env.py), which the demo's cache then starts with.
@pytest.mark.usefixtures("tiny_vllm_server")
def test_the_demo_end_to_end_on_the_cpu_build(vllm_env, tmp_path, page_browser):
    out = tmp_path / "demo"
    # The demo's cache root (OUT/vllm-cache) starts with that inspection: both servers then skip a fresh
    # interpreter each (about 9 s of CPU) on two loaded cores. A cold start is what gpu-check's test and the
    # session's first server check.
    if (vllm_env.cache_root / "modelinfos").is_dir():
        shutil.copytree(vllm_env.cache_root / "modelinfos", out / "vllm-cache" / "modelinfos")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bench", "demo", "--vllm-venv", str(vllm_env.venv), "--out", str(out),
                           "--scenarios", "S1_chat", "--concurrencies", "2", "--length-scale", "0.0625",
                           "--max-num-seqs", "1,4", "--window-s", "5", "--budget-minutes", "0.85", "--health-timeout-s", "400"],
                          cwd=REPO, text=True, capture_output=True, timeout=1200)
    wall = time.monotonic() - t0
    lines = proc.stdout.strip().splitlines()
    print(f"\ndemo at reduced size: {wall:.0f} s wall; " + next((l for l in lines if "done in" in l), "no timing line"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # It ends with the report page's path, and says the verdict and the timing before.
    page = out / "report" / "report.html"
    assert lines[-1] == f"bench demo: report page: {page.resolve()}"
    assert any(line.startswith("bench demo: verdict ") for line in lines)
    # What it printed has the shape of the README's demo output, line by line.
    assert demo_output_shape(proc.stdout) == demo_output_shape(readme_demo_block())
    timing = json.loads((out / "timing.json").read_text())
    assert [s["step"] for s in timing["steps"]] == ["model", "servers start", "baseline sweep",
                                                    "candidate sweep", "report"]

    # Two real sweeps that differ in the one setting, with the capacity search run.
    settings = {}
    for side, seqs in (("baseline", "1"), ("candidate", "4")):
        m = json.loads((out / "runs" / side / "manifest.json").read_text())
        assert m["counts"]["valid"] == 1 and m["server"]["served_models"] == ["tiny"]
        assert f"--max-num-seqs {seqs}" in m["served_flags"] and m["label"] == f"max-num-seqs {seqs}"
        # --capacity-search ran: it added runs, or (on a loaded machine, where the grid used the 0.85-minute
        # budget) it chose its next load and said the budget stopped it there; how many it ran is a figure
        closed = m["extra"]["scenarios"]["S1_chat"]["closed"]
        print(f"{side}: capacity search {closed['runs']} runs, {closed['gpu_s']} s; {closed['stopped']}")
        assert closed["runs"] > 0 or closed["stopped"].startswith("the GPU budget stopped it before c="), closed
        assert (out / "runs" / side / "startup" / f"local-{side}.json").is_file()
        assert "Starting vLLM server on http://127.0.0.1:" in (out / "logs" / f"{side}-server.log").read_text()
        settings[side] = CMP.server_settings(m["served_flags"].split())
    differs = {k for k in settings["baseline"] if settings["baseline"][k] != settings["candidate"].get(k)}
    assert differs == {"maxNumSeqs"}

    # The report folder of the contract, with a verdict; the plan and the compare page beside it.
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert {"slo", "runs", "scenarios", "comparison", "verdict"} <= set(summary)
    assert summary["verdict"]["basis"] == "slo" and summary["slo"]["ttft_p99_ms"] == 500
    assert (out / "report" / "report.md").is_file() and "## Startup" in (out / "report" / "report.md").read_text()
    for extra in ("plan/plan.html", "plan/plan.json"):
        assert (out / "report" / extra).is_file(), extra
    assert (out / "compare" / "compare.html").is_file()

    # The page: self-contained, clean in Chromium, its numbers those of summary.json.
    assert external_references(page) == []
    view = open_checked(page_browser, page, "demo report")
    paths = check_against(view, summary)
    assert ["scenarios", "S1_chat", "peak", "output_tok_s"] in paths
    assert pages.verdict_state(summary["verdict"]).upper() in view.text
    assert "Startup" in view.text and "Replica plan" in view.text
