"""Calibration of the capacity interval against a load generator with a known true capacity.

A fake `vllm bench serve` (below) whose runs differ by a run-level random factor, as two identical
runs on one server do: every latency of a run is multiplied by one lognormal factor and its
throughput divided by it. Its true capacity is known: the output tok/s at the highest concurrency
whose median-run TTFT p99 meets the limit. Each simulated rerun is a whole sweep: the grid's
files (each run sized by time, as bench.run.sizing sizes it), the capacity search driven by the
sweep's own loop (bench.run.extra_runs.drive, default settings, a GPU-time budget), then the
report's analysis reading the folder (bench.analysis.capacity_report.scenario_capacity, the one
closed-loop capacity function). No vLLM; each rerun takes well under a second.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.analysis import capacity as C
from bench.analysis import capacity_report as CR
from bench.analysis import results as R
from bench.analysis.capacity import search as S
from bench.analysis import side as SIDE
from bench.analysis import verdict as V
from bench.analysis.capacity import interval as CAP
from bench.run import extra_runs as X
from bench.run import sizing

GRID = (1, 2, 4, 8, 16, 32)
OUT_LEN = 8
LIMITS = {"ttft_ms": 500.0, "decode_ms": 50.0}
RERUNS = 12


class FakeServer:
    """Closed loop at concurrency c: output tok/s = top x c / (c + half) (it saturates), TTFT p99 =
    ms_per_c x c, ITL 20 ms; each run draws one factor exp(N(0, sigma)) that slows it down."""

    def __init__(self, top: float, ms_per_c: float, sigma: float, half: float = 24.0):
        self.top, self.ms_per_c, self.sigma, self.half = top, ms_per_c, sigma, half

    def tok_s(self, c: float) -> float:
        return self.top * c / (c + self.half)

    @property
    def true_concurrency(self) -> int:
        return max(c for c in range(1, 1000) if self.ms_per_c * c <= LIMITS["ttft_ms"])

    @property
    def true_capacity(self) -> float:
        return self.tok_s(self.true_concurrency)

    def run(self, rng: np.random.Generator, scenario: str, c: int, n: int) -> dict:
        slow = float(math.exp(rng.normal(0.0, self.sigma)))
        tok = self.tok_s(c) / slow
        ttfts = rng.uniform(0.6, 1.0, n) * self.ms_per_c * c / 0.996 * slow
        itls = rng.uniform(0.95, 1.05, (n, OUT_LEN - 1)) * 20.0 * slow
        duration = n * OUT_LEN / tok
        return {
            "num_prompts": n, "completed": n, "failed": 0, "duration": duration, "max_concurrency": c,
            "output_throughput": tok, "request_throughput": tok / OUT_LEN, "total_output_tokens": n * OUT_LEN,
            "p50_ttft_ms": float(np.median(ttfts)), "p99_ttft_ms": float(np.percentile(ttfts, 99)),
            "p50_itl_ms": float(np.median(itls)), "p99_itl_ms": float(np.percentile(itls, 99)),
            R.META_SCENARIO: scenario, R.META_OUTPUT_LEN: str(OUT_LEN), R.META_INPUT_LEN: "64",
            # per-request detail, as --save-detailed writes it (the grid's runs have none)
            "detail": {"ttfts": list(ttfts / 1000), "itls": (itls / 1000).tolist(), "output_lens": [OUT_LEN] * n,
                       "errors": [""] * n},
        }


WINDOW_S = 5.0  # the shortest window a sweep allows: fewer requests, the same rules
BUDGET_S = 20 * 60.0  # GPU time of the search per scenario, in the fake's seconds


def sweep(folder: Path, server: FakeServer, rng: np.random.Generator, scenario: str = "S1_chat") -> dict:
    """The grid, then the capacity search within its budget; returns the sweep's record."""
    folder.mkdir(parents=True)
    (folder / CR.SEARCH_DIR).mkdir()
    grid_s = 0.0
    search = S.Search(**LIMITS)

    def size(c: float) -> int:
        return sizing.closed_loop_requests(server.tok_s(c) / OUT_LEN, int(c), WINDOW_S)

    for c in GRID:
        data = server.run(rng, scenario, c, size(c))
        data.update(data.pop("detail"))
        grid_s += data["duration"]
        (folder / R.result_filename(scenario, c)).write_text(json.dumps(data))
        search.observe(c, data, R.result_filename(scenario, c))

    def run(step: S.Step, k: int):
        c = int(step.load)
        data = server.run(rng, scenario, c, step.requests or size(c))
        data.update(data.pop("detail"))
        path = folder / CR.SEARCH_DIR / CR.search_filename(scenario, c, k)
        path.write_text(json.dumps(data))
        return R.load_result(path, R.Expectation(scenario, c)), data["duration"]

    def estimate(step: S.Step) -> float:
        return (step.requests or size(step.load)) * OUT_LEN / server.tok_s(step.load)

    spent, runs, stopped = X.drive(search, run, estimate, BUDGET_S)
    return {"runs": runs, "spent": spent, "grid_s": grid_s, "stopped": stopped, "search": search}


def capacity(folder: Path, scenario: str = "S1_chat") -> CAP.Capacity:
    side = SIDE.load_side(folder)
    return CR.scenario_capacity(folder, side.runs, **{"ttft_ms": 500.0, "decode_ms": 50.0})[scenario]["closed"]


@pytest.mark.parametrize("knee,seed", [(11.5, 1000), (23.5, 4000)], ids=["near-a-grid-point", "mid-bracket"])
def test_the_interval_covers_the_true_capacity_over_reruns(tmp_path, knee, seed):
    # the true capacity at c=11 (the grid brackets it between 8 and 16, the search near it), or at
    # c=23, midway between the grid's 16 and 32
    server = FakeServer(top=3000.0, ms_per_c=500.0 / knee, sigma=0.04)
    truth = server.true_capacity
    covered, reached, widths, costs, noises, tok_noises, points, ends = 0, 0, [], [], [], [], [], []
    for k in range(RERUNS):
        rng = np.random.default_rng(seed + k)
        record = sweep(tmp_path / f"r{k}", server, rng)
        cap = capacity(tmp_path / f"r{k}")
        covered += cap.lo <= truth <= cap.hi
        reached += record["search"].stopped == S.NARROW
        widths.append(cap.hi / cap.lo)
        costs.append(record["spent"])
        noises.append(cap.noise_pct)
        tok_noises.append(cap.noise_by_figure[C.OUTPUT_TOK_S])
        points.append(cap.point)
        ends.append(cap.load_pass)
    coverage = covered / RERUNS
    print(f"\n[calibration] true capacity {truth:,.1f} tok/s at c={server.true_concurrency}: covered in "
          f"{covered} of {RERUNS} reruns ({100 * coverage:.0f} %); ends within 1.22x in {reached}; interval "
          f"width (hi/lo, bands included) median {np.median(widths):.2f}, largest {max(widths):.2f}; search GPU "
          f"time median {np.median(costs) / 60:.1f} min, most {max(costs) / 60:.1f} min; band used median "
          f"{np.median(noises):.1f} % (the largest figure's; output tok/s's, which widens the ends, "
          f"{np.median(tok_noises):.1f} %); pass ends {', '.join(f'c={c} x{ends.count(c)}' for c in sorted(set(ends)))}, "
          f"point figures within {100 * (max(points) / min(points) - 1):.1f} % of each other, "
          f"{sum(max(a, b) / min(a, b) <= 1.05 for i, a in enumerate(points) for b in points[i + 1:])} of "
          f"{len(points) * (len(points) - 1) // 2} pairs within 5 %")
    assert coverage >= 0.9
    assert reached >= 0.8 * RERUNS and max(widths) <= 1.6
    assert max(costs) <= BUDGET_S + 1e-9


BASE = FakeServer(top=1500.0, ms_per_c=500.0 / 11.5, sigma=0.04)  # the baseline every ratio case compares with
BASE_SEED = 7000


@pytest.fixture(scope="module")
def baselines(tmp_path_factory) -> list[CAP.Capacity]:
    """One baseline sweep per rerun, shared by the ratio cases below (as one baseline measured once is
    compared with several candidates): each case's candidates are its own, the baselines the same."""
    root = tmp_path_factory.mktemp("baselines")
    caps = []
    for k in range(RERUNS):
        sweep(root / f"base{k}", BASE, np.random.default_rng(BASE_SEED + k))
        caps.append(capacity(root / f"base{k}"))
    return caps


def ratio_reruns(tmp_path: Path, baselines: list[CAP.Capacity], ratio: float, seed: int) -> list[str]:
    """The verdict's state at 1.5x in each rerun of two sides whose true per-GPU ratio is `ratio`
    (the same latency curve, GPU-like run-to-run spread: sigma 4 %)."""
    cand = FakeServer(top=BASE.top * ratio, ms_per_c=BASE.ms_per_c, sigma=BASE.sigma)
    assert cand.true_capacity / BASE.true_capacity == pytest.approx(ratio)
    states = []
    for k, base_cap in enumerate(baselines):
        folder = tmp_path / f"{ratio:g}-cand{k}"
        sweep(folder, cand, np.random.default_rng(seed + k))
        call = V.slo_call("S1_chat", capacity(folder), base_cap, CAP.SEARCH, a_gpus=1, b_gpus=1, threshold=1.5,
                          labels=("cand", "base"))
        states.append(call.state)
    print(f"\n[calibration] true ratio {ratio:g}x against 1.5x: pass {states.count(V.PASS)}, inconclusive "
          f"{states.count(V.INCONCLUSIVE)}, fail {states.count(V.FAIL)} of {RERUNS} reruns")
    return states


def test_a_true_2x_case_passes_in_most_reruns_and_never_fails(tmp_path, baselines):
    # The question "12 replicas to 8" on a close case: the knee is between c=11 and c=12 on both
    # sides; each side's capacity known to +-10 % puts a true 2x above 1.5x
    states = ratio_reruns(tmp_path, baselines, 2.0, 2000)
    assert V.FAIL not in states and states.count(V.PASS) > RERUNS / 2


def test_a_clear_case_passes_within_the_budget(tmp_path, baselines):
    states = ratio_reruns(tmp_path, baselines, 3.0, 3000)  # the question "12 replicas to 4"
    assert states.count(V.PASS) == RERUNS


def test_a_true_ratio_below_the_threshold_fails_and_never_passes(tmp_path, baselines):
    states = ratio_reruns(tmp_path, baselines, 1.1, 5000)
    assert V.PASS not in states and states.count(V.FAIL) > RERUNS / 2
