"""The start-up record and report with the compile cache: the pull step's restore in the timeline,
and the per-pool phase model (measured where measured, the PoC's figure or an estimate where not)."""

from __future__ import annotations

import json

import pytest

from bench.startup import collect as startup_collect
from bench.startup import model as startup_model
from bench.startup import phases
from bench.startup import report as startup_report
from bench.startup import timeline
from components import compile_cache as component
from tests.fixtures import kube_objects as K
from tests.test_bench_startup import LOG_026
from tests.test_startup_collect import NODE, FakeApi
from weights import compile_cache as weights_cache

POD = "gemma-fp8-7d9f-abcde"


@pytest.fixture
def log026():
    return phases.parse_log(LOG_026.splitlines())


def cached_cold_boot(pulled_by_step: bool = True) -> dict:
    """A new node; the image pulled for the first step (82.5 s), the cache restored in 5.5 s, vLLM from 137.5 s."""
    objs = K.cold_boot()
    objs["pod"] = K.pod(POD, NODE, created=0, scheduled=48, started=137.5, ready=537)
    return K.with_cache_steps(objs, pull_started=131, pull_finished=136.5, pulled_by_step=pulled_by_step)


def build(objs, log, **kw):
    return timeline.build(objs["pod"], node=objs["node"], nodeclaim=objs["nodeclaim"], events=objs["events"],
                          log=log, container="vllm", **kw)


def test_the_three_modules_agree_on_the_step_names_and_the_result_line():
    assert timeline.CACHE_PULL_CONTAINER == component.PULL_CONTAINER
    assert timeline.CACHE_PUSH_CONTAINER == component.PUSH_CONTAINER
    assert timeline.CACHE_RESULT_MARK == weights_cache.RESULT_MARK


def test_the_result_line_is_read_from_the_end_of_a_steps_log():
    assert timeline.cache_result(K.pull_log())["outcome"] == "restored"
    log = K.pull_log() + "compile-cache-result {not json\nsomething else\n"
    assert timeline.cache_result(log)["bytes"] == 12_345_678
    with_timestamps = "\n".join(f"2026-08-05T10:02:15.000Z {line}" for line in K.pull_log().splitlines())
    assert timeline.cache_result(with_timestamps)["files"] == 57
    assert timeline.cache_result("") is None and timeline.cache_result("no result here") is None
    # The line the command really prints reads back the same.
    result = weights_cache.Result("pull", "absent", "s3://b/compile-cache/k/", seconds=0.2)
    assert timeline.cache_result(result.line() + "\n" + result.record())["outcome"] == "absent"


def test_an_image_pulled_for_the_first_step_is_a_pull_and_the_restore_is_its_own_phase(log026):
    record = build(cached_cold_boot(), log026, cache_pull=timeline.cache_result(K.pull_log()))
    assert record["image"]["image_cached"] is False and record["image"]["image_pull_s"] == 82.5
    phases = record["phases"]
    assert phases["cache_restore_s"] == 5.5
    assert phases["container_start_s"] == 1.5  # 89.5 s from scheduled to vLLM, less 82.5 pull and 5.5 restore
    assert sum(v for v in phases.values() if v is not None) == pytest.approx(record["total_s"]) == 537.0
    assert record["marks"]["cache_restored"] == "2026-08-05T10:02:16.500000Z"
    assert record["compile_cache_restore"] == {"outcome": "restored", "files": 57, "bytes": 12_345_678,
                                               "seconds": 4.2, "reason": "", "step_s": 5.5,
                                               "uri": record["compile_cache_restore"]["uri"]}
    label = startup_report._boot_label(record)
    assert "image pulled" in label and "compile cache restored from S3 (11.8 MiB in 4.2 s)" in label


def test_a_pod_whose_step_log_was_not_read_says_so_instead_of_a_failure(log026):
    record = build(cached_cold_boot(), log026, cache_pull=None)
    assert record["compile_cache_restore"]["outcome"] is None and record["phases"]["cache_restore_s"] == 5.5
    text = startup_report.restore_text(record)
    assert text == "compile cache pull not recorded"
    assert "None" not in startup_report.timeline_table(record)


def test_the_collector_reads_the_steps_logs_with_the_same_rights(log026):
    objs = cached_cold_boot()
    push_log = "compile-cache-result " + json.dumps({"action": "push", "outcome": "pushed", "files": 57,
                                                     "bytes": 12_345_678, "seconds": 3.0, "reason": "no cache for this key yet"})

    class Api(FakeApi):
        def get_text(self, path, **params):
            self.calls.append((path, params))
            return {"compile-cache-pull": K.pull_log(), "compile-cache-push": push_log}.get(params.get("container"),
                                                                                            self.log)

    api = Api({f"/api/v1/namespaces/vllm/pods/{POD}": objs["pod"], f"/api/v1/nodes/{NODE}": objs["node"],
               "/apis/karpenter.sh/v1/nodeclaims/l40s-x7k2p": objs["nodeclaim"], "events": objs["events"]}, LOG_026)
    record = startup_collect.collect(api, "vllm", POD, server="gemma-fp8")
    assert record["problems"] == []
    assert record["compile_cache_restore"]["outcome"] == "restored"
    assert record["compile_cache_push"] == {"outcome": "pushed", "files": 57, "bytes": 12_345_678, "seconds": 3.0,
                                            "reason": "no cache for this key yet"}
    containers = [c[1].get("container") for c in api.calls if c[0].endswith("/log")]
    assert containers == ["vllm", "compile-cache-pull", "compile-cache-push"]
    assert "pushed 57 file(s)" in startup_report.timeline_table(record)
    assert "compile cache restored from S3" in startup_report.summary_line(record)


# -- the phase model ------------------------------------------------------------------------------------


def test_without_records_the_model_is_the_pocs_figures_and_labelled_estimates():
    cold, target = (startup_model.estimate_summary("g6e.2xlarge")[k] for k in ("cold", "snapshot+cache"))
    # 48 node + 82 image + 29 weights (Run:ai) + 73 compile + 185 init (20 engine besides the compile + 165 unnamed)
    assert cold == {"node": 48.0, "image": 82.0, "restore": None, "weights": 29.0, "compile": 73.0, "init": 185.0,
                    "total": 417.0}
    # 48 node + 0 image (snapshot) + 5 restore + 29 weights + 8.5 compile + 117.5 init (25 + 92.5)
    assert target == {"node": 48.0, "image": 0.0, "restore": 5.0, "weights": 29.0, "compile": 8.5, "init": 117.5,
                      "total": 208.0}
    g7e = startup_model.model("g7e.2xlarge", [], startup_model.TARGET)
    assert g7e["weights"].cell() == "18.0 s (PoC)"
    assert g7e["compile"].basis == "estimate" and "g6e.2xlarge" in g7e["compile"].note
    # No PoC load on this type: the bytes over 47% of its 20 Gbps burst.
    g6e4 = startup_model.model("g6e.4xlarge", [], startup_model.COLD)["weights"]
    assert g6e4.basis == "estimate" and g6e4.seconds == pytest.approx(31.6 * 2**30 * 8 / 1e9 / 9.4, abs=0.1)
    # A 100 Gbps NIC is not what limits a Run:ai load: at most 14.5 Gbps.
    g7e8 = startup_model.model("g7e.8xlarge", [], startup_model.COLD)["weights"]
    assert g7e8.seconds == pytest.approx(31.6 * 2**30 * 8 / 1e9 / 14.5, abs=0.1)
    assert startup_model.model("p5.48xlarge", [], startup_model.COLD)["weights"].cell().startswith("no estimate")


def test_the_report_states_the_target_as_the_models_estimate_until_a_boot_measures_it(log026):
    lines = "\n".join(startup_model.section([], ["g6e.2xlarge"]))
    assert "Target: at most 150 s" in lines
    assert "The model estimates 208.0 s, 58.0 s over the target; this is the model's estimate until a cluster " \
           "measures it" in lines
    assert "| Compile | 73.0 s (PoC) | 8.5 s (PoC) |" in lines
    assert "| Image | 82.0 s (PoC) | 0.0 s (estimate; present from the snapshot) |" in lines
    assert "None" not in lines and "nan" not in lines

    # A boot on a new node, image from the snapshot, cache restored and hit: measured where it ran.
    objs = cached_cold_boot(pulled_by_step=False)
    objs["events"]["items"] = [e for e in objs["events"]["items"] if e["reason"] != "Pulled"] + [
        K.event("Pod", POD, "Pulled", f'Container image "{K.IMAGE}" already present on machine', 130,
                component="kubelet")]
    objs["pod"] = K.pod(POD, NODE, created=0, scheduled=46, started=57, ready=180)
    K.with_cache_steps(objs, pull_started=48, pull_finished=56, pulled_by_step=False)
    hit = dict(log026, compile_cache="hit", compile_total_s=8.1)
    record = build(objs, hit, cache_pull=timeline.cache_result(K.pull_log(seconds=7.0)))
    assert record["total_s"] == 180.0 and record["image"]["image_cached"] is True
    figures = startup_model.model("g6e.2xlarge", [record], startup_model.TARGET)
    assert figures["node"].cell() == "46.0 s (measured, 1 boot)"
    assert figures["restore"].cell() == "8.0 s (measured, 1 boot)"
    assert figures["compile"].cell() == "8.1 s (measured, 1 boot)"
    assert figures["init"].seconds == pytest.approx(180 - 46 - 0 - 8 - 29.12 - 8.1, abs=0.1)
    section = "\n".join(startup_model.section([record]))
    assert "Measured: 180.0 s (measured, 1 boot): missed by 30.0 s." in section
    assert "| Measured total | not measured | 180.0 s (measured, 1 boot) |" in section
    # The cold column still comes from the PoC: this boot did not run cold.
    assert "| Compile | 73.0 s (PoC) | 8.1 s (measured, 1 boot) |" in section
    # A hit from the pod's own volume (a restart) measures the compile, but is no boot of the scenario.
    restart = dict(record, compile_cache_restore=dict(record["compile_cache_restore"], outcome="kept"))
    assert startup_model.measured_total([restart], startup_model.TARGET) is None
    assert startup_model.model("g6e.2xlarge", [restart], startup_model.TARGET)["compile"].basis == "measured"
    assert startup_model.model("g6e.2xlarge", [restart], startup_model.TARGET)["restore"].basis == "estimate"


def test_the_reports_startup_section_shows_the_model_for_the_runs_pool_without_records(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"instance_type": "g7e.2xlarge"}))
    text = startup_report.markdown(tmp_path)
    assert "## Startup" in text and "**g7e.2xlarge** (no recorded boot" in text
    assert "Target" not in text  # the target is the g6e.2xlarge configuration's
    assert startup_report.markdown(tmp_path / "empty") == ""


def test_a_local_cpu_start_up_is_not_modelled_as_a_cloud_pool():
    """The demo's `vllm serve` on this machine records instance type local-cpu: its boots are shown as
    measured, and no PoC g6e.2xlarge figure (node, image pull, compile, init) stands in for them."""
    record = {"instance_type": "local-cpu", "total_s": 41.0, "phases": {"weight_load_s": 1.0, "compile_s": 20.0}}
    text = "\n".join(startup_model.section([record], ["local-cpu"]))
    assert "**local-cpu** (1 recorded boot): not modelled" in text
    assert "g6e.2xlarge" not in text and "388.0" not in text and "(model)" not in text
    assert startup_model.modelled("g6e.2xlarge") and not startup_model.modelled("local-cpu")
    cloud = "\n".join(startup_model.section([], ["g6e.2xlarge"]))
    assert "**Total, pod created to /health**" in cloud  # a cloud pool keeps its model
