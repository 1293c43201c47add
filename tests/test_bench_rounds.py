"""bench.round: another measurement of every target from a fresh server, pooled by the report.

The setting's refusals; round 1 rendering exactly as a stack without the key; round 2's new bench Jobs,
results prefixes and server pod template; the report Job passing round 1's prefixes of the same
configuration as repeats (and reading them); and the report's rendered command run against moto with
one earlier round present and one missing."""

from __future__ import annotations

import argparse
import json
import subprocess

import boto3
import pytest

from bench.analysis import opener, publish
from components.vllm_server import BENCH_ROUND
from stacks.ops import mocks
from stacks.settings import ConfigError, settings_from_config
from tests.fixtures.pulumi_stack import render_with, stack_config
from tests.test_bench_plan import G7E, L40S
from tests.test_bench_publish import finish
from tests.test_bench_s3_folders import recorded_sweep
from tests.test_report_job import bench_job_names, container, flag, publish_command, report_job

TARGETS = ("nvfp4-g7e", "nvfp4-l40s")


def g7e_round(n: int | None, **bench_changes):
    bench = {**stack_config("g7e")["vllm-poc:bench"], **bench_changes}
    if n is not None:
        bench["round"] = n
    return render_with("g7e", bench=bench)


@pytest.fixture(scope="module")
def rounds():
    """g7e without the key, at round 1, 2 and 3."""
    return {n: g7e_round(n) for n in (None, 1, 2, 3)}


def deployment(rendered, server):
    (found,) = [d for d in rendered.k8s("Deployment") if d["metadata"]["name"] == server]
    return found


@pytest.mark.parametrize("value", [0, -1, 2.5, "2", True])
def test_a_round_is_a_whole_number_from_one(value):
    config = stack_config("g7e")
    config["vllm-poc:bench"] = {**config["vllm-poc:bench"], "round": value}
    with pytest.raises(ConfigError) as err:
        settings_from_config(config, stack="g7e")
    (problem,) = [p for p in err.value.problems if p.startswith("vllm-poc:bench.round:")]
    assert "a whole number from 1" in problem and "pulumi config set --path 'vllm-poc:bench.round' 2" in problem


def test_round_defaults_to_one():
    assert settings_from_config(stack_config("g7e"), stack="g7e").bench.round == 1


def test_round_one_renders_as_a_stack_without_the_key(rounds):
    assert rounds[1].files() == rounds[None].files()
    assert rounds[1].outputs == rounds[None].outputs
    for server in TARGETS:
        assert BENCH_ROUND not in deployment(rounds[1], server)["spec"]["template"]["metadata"]["annotations"]


def test_round_two_sweeps_every_target_again_from_a_fresh_server(rounds):
    one, two = rounds[1], rounds[2]
    first, second = one.outputs["benchResults"], two.outputs["benchResults"]
    assert set(first) == set(second) == set(TARGETS)
    for server in TARGETS:
        assert second[server] != first[server]  # a new prefix: round 1's results stay as they are
        annotations = deployment(two, server)["spec"]["template"]["metadata"]["annotations"]
        assert annotations[BENCH_ROUND] == "2"  # a new pod template: a new pod even without the GPU release
    assert set(bench_job_names(two)).isdisjoint(bench_job_names(one))
    assert len(bench_job_names(two)) == len(TARGETS)
    # the servers no bench target names keep their pods
    others = [d for d in two.k8s("Deployment") if d["metadata"]["name"] not in TARGETS
              and d["metadata"]["labels"].get("app.kubernetes.io/name") == "vllm"]
    assert all(BENCH_ROUND not in (d["spec"]["template"]["metadata"].get("annotations") or {}) for d in others)


def test_the_report_of_round_n_pools_rounds_one_to_n_minus_one(rounds):
    """Round 1's prefixes as the stack computed them (its benchResults at round 1), not copied strings."""
    first, second = rounds[1].outputs["benchResults"], rounds[2].outputs["benchResults"]
    argv = container(report_job(rounds[2]))["args"]
    assert flag(argv, "--candidate") == [second["nvfp4-g7e"]] and flag(argv, "--baseline") == [second["nvfp4-l40s"]]
    assert flag(argv, "--candidate-repeat") == [first["nvfp4-g7e"]]
    assert flag(argv, "--baseline-repeat") == [first["nvfp4-l40s"]]
    third = container(report_job(rounds[3]))["args"]
    assert flag(third, "--candidate-repeat") == [first["nvfp4-g7e"], second["nvfp4-g7e"]]
    assert flag(third, "--baseline-repeat") == [first["nvfp4-l40s"], second["nvfp4-l40s"]]
    # round 1 has none, and each round is its own report
    assert not [a for a in container(report_job(rounds[1]))["args"] if a.endswith("-repeat")]
    names = {report_job(rounds[n])["metadata"]["name"] for n in (1, 2, 3)}
    assert len(names) == 3


def test_the_report_may_read_the_earlier_rounds(rounds):
    bucket = rounds[2].outputs["resultsBucket"]
    first = rounds[1].outputs["benchResults"]
    arn = f"arn:aws:s3:::{bucket}"
    policy = json.loads(rounds[2].one("aws:iam/rolePolicy:RolePolicy", "report-identity-policy").inputs["policy"])
    (read,) = [s for s in policy["Statement"] if s["Sid"] == "ReadSweepsAndOwnReport"]
    for server in TARGETS:
        assert f"{arn}/{first[server].removeprefix(f's3://{bucket}/')}*" in read["Resource"]


def test_the_gpu_release_waits_for_the_report_of_this_round(rounds):
    two = rounds[2]
    report = report_job(two)["metadata"]["name"]
    release = [j for j in two.k8s("Job") if j["metadata"]["labels"].get("vllm-poc/action") == "release"]
    assert release
    for job in release:
        argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert report in [argv[i + 1] for i, a in enumerate(argv) if a == "--job"]


def test_a_changed_configuration_pools_none_of_the_old_rounds(rounds):
    """Any change besides the round renames every round's prefix: round 2 of the new settings repeats round 1
    of the new settings, never a sweep of the old ones."""
    old_first = rounds[1].outputs["benchResults"]
    new_first = g7e_round(1, concurrencies=[1, 8, 64]).outputs["benchResults"]
    argv = container(report_job(g7e_round(2, concurrencies=[1, 8, 64])))["args"]
    assert flag(argv, "--candidate-repeat") == [new_first["nvfp4-g7e"]] != [old_first["nvfp4-g7e"]]
    assert flag(argv, "--baseline-repeat") == [new_first["nvfp4-l40s"]] != [old_first["nvfp4-l40s"]]


def rows_note(status, role):
    (row,) = [r for r in status["earlier_rounds"] if r["role"] == role]
    return row["note"]


def run_round_two_report(two, first, tmp_path, round_one_candidate: dict):
    """Round 2's report Job command as rendered, against moto, with round 2's sweeps and the candidate's round 1
    (recorded with `round_one_candidate`) in S3 and the baseline's round 1 missing; pip is not run (this
    Python has the requirements). Returns (its exit code, its log, the files it wrote, their prefix)."""
    command, env = publish_command(two, tmp_path)
    bucket = two.outputs["resultsBucket"]
    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    prefix = {k: v.removeprefix(f"s3://{bucket}/") for k, v in two.outputs["benchResults"].items()}
    g7e = dict(instance_type="g7e.2xlarge", price=1.5, capacity_type="spot")
    sweeps = [
        ("nvfp4-g7e", G7E, prefix["nvfp4-g7e"], g7e),
        ("nvfp4-g7e", G7E, first["nvfp4-g7e"].removeprefix(f"s3://{bucket}/"), {**g7e, **round_one_candidate}),
        ("nvfp4-l40s", {s: v for s, (v, _) in L40S.items()}, prefix["nvfp4-l40s"],
         dict(instance_type="g6e.2xlarge", price=2.76, capacity_type="on-demand")),
    ]
    for index, (server, peaks, where, kw) in enumerate(sweeps):
        (tmp_path / f"s{index}").mkdir()
        folder = recorded_sweep(tmp_path / f"s{index}", server, peaks, where, **kw)
        manifest = json.loads((folder / "manifest.json").read_text())
        upload = {**manifest["upload"], "uri": f"s3://{bucket}/{where}"}  # this render's bucket
        (folder / "manifest.json").write_text(json.dumps({**manifest, "label": f"g7e/{server}", "upload": upload}))
        finish(folder)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, where + path.relative_to(folder).as_posix())
    proc = subprocess.run(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    report = two.outputs["report"]["uri"].removeprefix(f"s3://{bucket}/")
    written = {o["Key"].removeprefix(report): client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
               for o in client.list_objects_v2(Bucket=bucket, Prefix=report).get("Contents", [])}
    return proc.returncode, proc.stdout, written, f"{bucket}/{report}"


def test_the_rendered_report_pools_the_round_it_finds_and_names_the_one_it_does_not(aws, rounds, tmp_path,
                                                                                     monkeypatch, capsys):
    """Round 1's candidate sweep is in S3, its baseline sweep is not: the report is written, pools the
    candidate's round, and its log, status.json, inputs.json and the next `pulumi up`'s stack output say
    the baseline's round was left out."""
    two, first = rounds[2], rounds[1].outputs["benchResults"]
    rc, out, written, where = run_round_two_report(two, first, tmp_path, {})
    assert rc == 0, out
    assert f"earlier round of the candidate ({first['nvfp4-g7e']}): pooled" in out
    assert (f"earlier round of the baseline ({first['nvfp4-l40s']}): left out, no sweep there (that round never "
            "ran, or the configuration changed since it did)") in out
    assert {"report.md", "summary.json", "plan.json", "inputs.json", "status.json"} <= set(written)
    report_md = written["report.md"].decode()
    assert "Repeats" in report_md and first["nvfp4-g7e"] in report_md
    status = json.loads(written["status.json"])
    assert status["state"] == "written"
    assert status["note"] == (f"1 of 2 earlier rounds left out of the pooled figures: {first['nvfp4-l40s']} (why, "
                              "for each: earlier_rounds)")
    assert "no sweep there (that round never ran" in rows_note(status, "baseline-repeat")
    rows = {r["role"]: r for r in status["earlier_rounds"]}
    assert rows["candidate-repeat"]["pooled"] is True and rows["baseline-repeat"]["pooled"] is False
    inputs = json.loads(written["inputs.json"])
    assert [r["pooled"] for r in inputs["earlier_rounds"]] == [True, False]
    # bench open says it beside the verdict
    assert opener.main([two.outputs["report"]["uri"], "--out", str(tmp_path / "opened"), "--no-progress"]) == 0
    assert (f"Earlier rounds: 1 of 2 pooled into the figures; left out: {first['nvfp4-l40s']} (inputs.json says "
            "why).") in capsys.readouterr().out
    # the Job's own plan pools the same round as the report (and the plan the report wrote): one figure
    (plan_step,) = [c for c in inputs["commands"] if c["command"] == "plan"]
    assert plan_step["argv"].count("--repeat") == 1 and "--baseline-repeat" not in plan_step["argv"]
    summary = json.loads(written["summary.json"])
    for plan in (json.loads(written["plan.json"]), json.loads(written["plan/plan.json"])):
        pool = plan["fleet"]["pools"][next(iter(plan["fleet"]["pools"]))]["capacity"]
        assert pool["output_tok_s"] == summary["scenarios"][pool["scenario"]]["slo_capacity_interval"]["output_tok_s"]
    # the next `pulumi up` reads the written report: its output says the same in one sentence
    monkeypatch.setattr(mocks, "S3_OBJECTS", {f"{where}{name}": written[name].decode()
                                              for name in ("summary.json", "status.json")})
    output = g7e_round(2).outputs["report"]
    assert output["uri"] == two.outputs["report"]["uri"] and output["state"] in ("pass", "fail", "inconclusive")
    assert output["rounds"] == (f"1 of 2 earlier rounds pooled into the figures; left out: {first['nvfp4-l40s']} "
                                "(why: earlier_rounds in status.json under uri)")


def test_a_round_bench_report_refuses_leaves_the_report_to_this_round(aws, rounds, tmp_path):
    """Round 1's candidate sweep recorded another instance type (the hash makes this rare: a manifest edited by
    hand, a vLLM build that reports another version): bench report refuses to pool it, and the report is
    written from round 2 alone, saying why, instead of failing."""
    two, first = rounds[2], rounds[1].outputs["benchResults"]
    rc, out, written, _ = run_round_two_report(two, first, tmp_path, {"instance_type": "g7e.4xlarge"})
    assert rc == 0, out
    assert "bench report would not pool the earlier rounds (see above); writing the report from this round alone" \
        in out
    assert "Repeats" not in written["report.md"].decode()
    status = json.loads(written["status.json"])
    assert status["state"] == "written" and "2 of 2 earlier rounds left out" in status["note"]
    (candidate,) = [r for r in status["earlier_rounds"] if r["role"] == "candidate-repeat"]
    assert candidate["pooled"] is False and "bench report would not pool it" in candidate["note"]


def test_the_matrix_compare_pools_each_variants_earlier_rounds():
    """Variants: round 2's report Job passes each variant's round 1 (as the stack named it at round 1) as
    --variant-repeat, and publish gives bench compare each round under its variant's label."""
    bench = stack_config("matrix")["vllm-poc:bench"]
    first = render_with("matrix", bench={**bench, "round": 1}).outputs["benchResults"]
    argv = container(report_job(render_with("matrix", bench={**bench, "round": 2})))["args"]
    variants = bench["compare"]["variants"]
    assert flag(argv, "--variant-repeat") == [first[v] for v in variants]
    assert flag(argv, "--baseline-repeat") == [first[bench["compare"]["baseline"]]]
    # publish pairs each earlier round with the --variant kept in the same folder, and labels the compare
    parser = argparse.ArgumentParser()
    publish.add_parser(parser.add_subparsers())
    args = parser.parse_args(["publish", *argv])
    out, sweeps, earlier = publish.parse(args)
    pairs = {e.loc.uri: sweeps[e.of].loc.uri for e in earlier if e.role == "variant-repeat"}
    assert pairs == {first[v]: next(s.loc.uri for s in sweeps if s.role == "variant" and f"/{v}/" in s.loc.uri)
                     for v in variants}
    local = {"baseline": "/b", **{f"variant:{i:02d}": f"/v{i}" for i in range(1, len(variants) + 1)}}
    labels = {k: f"matrix/{k}" for k in local}
    (compare,) = [a for name, a, _ in publish._commands(args, local, out.uri, {"variant:01": ["/r1"]}, labels)
                  if name == "compare"]
    dirs = compare[:compare.index("--labels")]
    assert dirs == [*(f"/v{i}" for i in range(1, len(variants) + 1)), "/r1"]
    names = compare[compare.index("--labels") + 1].split(",")
    assert names == [labels[f"variant:{i:02d}"] for i in range(1, len(variants) + 1)] + ["matrix/variant:01"]
    # without rounds the compare keeps the manifests' labels, as before rounds existed
    (plain,) = [a for name, a, _ in publish._commands(args, local, out.uri) if name == "compare"]
    assert "--labels" not in plain


def test_a_variant_round_outside_its_variants_folder_is_refused():
    argv = ["--baseline", "s3://b/runs/m/a/1/", "--variant", "s3://b/runs/m/a/1/", "--variant", "s3://b/runs/m/c/1/",
            "--variant-repeat", "s3://b/runs/m/elsewhere/0/", "--out", "s3://b/runs/m/report/1/"]
    parser = argparse.ArgumentParser()
    publish.add_parser(parser.add_subparsers())
    with pytest.raises(publish.UsageError, match="--variant-repeat s3://b/runs/m/elsewhere/0/: no --variant in the "
                                                 "same folder"):
        publish.parse(parser.parse_args(["publish", *argv]))
