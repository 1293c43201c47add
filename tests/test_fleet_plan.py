"""`bench plan` writes the fleet: per serving pool, the replica bounds from the capacity interval and the
autoscaler's targets from the capacity's source run and the start-up time; the fragment is the
`vllm-poc:fleet` a stack validates; KEDA's and the HPA's rule, stepped through time."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from bench.analysis import fleet as F
from bench.analysis import plan as P
from stacks.settings import ConfigError, FleetSettings
from stacks.settings.reading import settings_from_config
from tests.fixtures.bench_pages import make_sweep


def _plan(tmp_path, *extra, seqs=64, startup=True, flags=None):
    cand = make_sweep(tmp_path, "g7e", 2.0, seqs=seqs, startup=startup)
    if flags is not None:
        manifest = json.loads((cand / "manifest.json").read_text())
        manifest["served_flags"] = flags
        (cand / "manifest.json").write_text(json.dumps(manifest))
    base = make_sweep(tmp_path, "l40s", 1.0, seqs=seqs)
    out = tmp_path / "out"
    rc = P.main([str(cand), "--baseline", str(base), "--current-replicas", "12", "--out", str(out), "--no-charts",
                 "--no-html", *map(str, extra)])
    return rc, out


def test_the_plan_writes_each_pools_bounds_and_targets_from_the_capacity(tmp_path):
    rc, out = _plan(tmp_path, "--headroom", 0.2, "--spares", 1)
    assert rc == 0
    plan = json.loads((out / "plan.json").read_text())
    row = plan["configurations"][0]
    pool = plan["fleet"]["pools"]["interactive"]  # no priority scheduling: the interactive pool
    assert set(plan["fleet"]["pools"]) == {"interactive"}
    # the bounds are the plan's own interval (headroom and spares included)
    assert [pool["min_replicas"], pool["max_replicas"]] == row["replicas_range"] and pool["reason"] is None
    # the binding scenario saturates first: the lowest concurrency that met the SLO
    cap = pool["capacity"]
    assert cap["scenario"] == "S2_summary" and cap["concurrency"] == 4 and cap["source"] == "grid"
    assert pool["running_per_replica"] == pytest.approx(4 * 0.8)
    # start-up from the folder's record (155 s): a queue of any size breaks the TTFT SLO within it
    assert pool["startup_s"] == 155.0 and "measured" in pool["startup_basis"]
    assert pool["waiting_per_replica"] == 1
    assert pool["scale_down_window_s"] >= 2 * 155 and pool["scale_down_period_s"] >= 155
    assert 0.5 <= pool["kv_cache_usage"] <= 0.9
    assert "## Fleet" in (out / "plan.md").read_text()


def test_the_fragment_is_the_stack_config_and_a_stack_validates_it(tmp_path):
    _, out = _plan(tmp_path, "--headroom", 0.2, "--spares", 1, flags="--scheduling-policy priority")
    plan = json.loads((out / "plan.json").read_text())
    assert set(plan["fleet"]["pools"]) == {"batch"}  # priority scheduling: the batch pool
    assert plan["fleet"]["pools"]["batch"]["min_replicas"] == 0  # batch tolerates a cold start
    text = (out / "fleet.yaml").read_text()
    config = yaml.safe_load(text)["vllm-poc:fleet"]
    assert config == F.stack_config(plan["fleet"])
    assert config["pools"]["batch"]["runningPerReplica"] == plan["fleet"]["pools"]["batch"]["running_per_replica"]
    # a batch pool at zero needs something that outlives its last replica to wake it
    with pytest.raises(ValueError, match="wakeQuery"):
        FleetSettings.model_validate(config)
    config["pools"]["batch"]["wakeQuery"] = "sum(kube_job_status_active)"
    assert FleetSettings.model_validate(config).pools["batch"].min_replicas == 0


def test_the_pool_a_plan_serves_can_be_named_and_a_wrong_one_exits_2(tmp_path, capsys):
    rc, out = _plan(tmp_path, "--fleet-pool", "batch=g7e", "--startup-s", 30)
    assert rc == 0
    pool = json.loads((out / "plan.json").read_text())["fleet"]["pools"]["batch"]
    assert pool["startup_s"] == 30 and pool["startup_basis"].startswith("given")
    rc, _ = _plan(tmp_path / "again", "--fleet-pool", "realtime=g7e")
    assert rc == 2 and "--fleet-pool realtime=g7e" in capsys.readouterr().err


def test_a_count_without_upper_bound_gives_no_pool_and_says_why(tmp_path):
    cand = make_sweep(tmp_path, "g7e", 2.0, seqs=64)
    out = tmp_path / "out"
    assert P.main([str(cand), "--load", "S1_chat=1000", "--out", str(out), "--no-charts", "--no-html",
                   "--startup-s", "100"]) in (0, 1)
    fleet = json.loads((out / "plan.json").read_text())["fleet"]
    pool = fleet["pools"]["interactive"]
    if pool["reason"] is None:
        assert pool["max_replicas"] >= pool["min_replicas"] >= 1
    else:
        assert "interactive" not in yaml.safe_load((out / "fleet.yaml").read_text())["vllm-poc:fleet"]["pools"]


def test_waiting_target_shrinks_with_the_start_up_time():
    # 10 req/s per replica, TTFT SLO 0.5 s, 20 % headroom: a sleep-mode wake (0.5 s) tolerates 4 waiting,
    # a cold start of minutes none beyond the first.
    assert F.waiting_target(10.0, 0.5, 0.5, 0.2) == 4
    assert F.waiting_target(10.0, 0.5, 150.0, 0.2) == 1


# -- KEDA's and the HPA's rule --------------------------------------------------------------------

RUNNING = F.Trigger("running", 3.2, average=True)
KV = F.Trigger("kv-cache", 0.8, average=False)


def test_desired_replicas_follow_the_hpa_formula_and_its_tolerance():
    assert F.desired_for(1, 8.0, RUNNING) == 3  # ceil(1 x (8 / 1) / 3.2)
    assert F.desired_for(3, 8.0, RUNNING) == 3  # 8 / 3 / 3.2 = 0.83: below, but...
    assert F.desired_for(3, 9.0, RUNNING) == 3  # ...within 10 % of the target: no change
    assert F.desired_for(2, 6.9, RUNNING) == 2  # 1.078: within the tolerance
    assert F.desired_for(2, 7.1, RUNNING) == 3  # 1.109: beyond it
    assert F.desired_for(2, 0.96, KV) == 3  # Value: ceil(2 x 0.96 / 0.8)
    assert F.recommend(2, {"running": 40.0, "kv-cache": 0.1}, [RUNNING, KV], 1, 6) == 6  # capped at max
    assert F.recommend(4, {"running": 0.0, "kv-cache": 0.0}, [RUNNING, KV], 2, 6) == 2  # held at min


def test_simulation_scales_up_at_once_serves_after_start_up_and_scales_down_slowly():
    busy = [(float(t), {"running": 8.0}) for t in range(0, 300, 15)]
    idle = [(float(t), {"running": 0.0}) for t in range(300, 1200, 15)]
    steps = F.simulate(busy + idle, [RUNNING], lo=1, hi=6, start=1, startup_s=120, down_window_s=300,
                       down_period_s=120)
    assert steps[0].replicas == 3 and steps[0].ready == 1  # asked for at once...
    at = next(s for s in steps if s.ready == 3)
    assert at.t == 120  # ...serving a start-up later
    after = [s for s in steps if s.t >= 300]
    assert all(s.replicas == 3 for s in after if s.t < 300 + 300 - 15)  # nothing goes inside the window
    downs = [s.t for prev, s in zip(steps, steps[1:]) if s.replicas < prev.replicas]
    assert downs and all(b - a >= 120 for a, b in zip(downs, downs[1:]))  # one replica per period
    assert steps[-1].replicas == 1
    assert max(s.replicas for s in steps) == math.ceil(8 / 3.2)


def test_a_fleet_stack_refuses_a_pool_that_cannot_be_served(tmp_path):
    base = yaml.safe_load(open("Pulumi.fleet.yaml"))["config"]
    broken = json.loads(json.dumps(base))
    broken["vllm-poc:fleet"]["pools"]["interactive"].update(minReplicas=0, maxReplicas=40, wakeQuery="vector(1)")
    with pytest.raises(ConfigError) as err:
        settings_from_config(broken, stack="fleet")
    text = "\n".join(err.value.problems)
    assert "vllm-poc:fleet.pools" in text and "only batch tolerates it" in text
    broken["vllm-poc:fleet"]["pools"]["interactive"]["minReplicas"] = 2
    with pytest.raises(ConfigError) as err:
        settings_from_config(broken, stack="fleet")
    assert any(p.startswith("vllm-poc:fleet.pools.interactive.maxReplicas") and "gpuLimit 8" in p
               for p in err.value.problems), err.value.problems
    broken["vllm-poc:fleet"]["pools"]["interactive"]["maxReplicas"] = 6
    broken["vllm-poc:bench"] = {"targets": ["chat"]}
    with pytest.raises(ConfigError, match="bench target"):
        settings_from_config(broken, stack="fleet")
    broken.pop("vllm-poc:bench")
    broken["vllm-poc:fleet"]["pools"]["text-only"] = broken["vllm-poc:fleet"]["pools"]["interactive"]
    with pytest.raises(ConfigError, match="no server has trafficClass text-only"):
        settings_from_config(broken, stack="fleet")
