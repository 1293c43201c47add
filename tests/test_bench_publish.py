"""`bench publish` (the report Job's entry point) and `bench open`, end to end against a moto server.

The sweeps arrive late, one of them first as a Spot-interrupted manifest: publish waits, never
reports the half-done sweep, and writes the report once both have finished.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
from pathlib import Path

import boto3
import pytest

from bench.analysis import opener
from bench.analysis import publish as PUB
from tests.test_bench_plan import G7E, L40S
from tests.test_bench_s3_folders import BUCKET, files, recorded_sweep, s3_files

CAND, BASE = "runs/g7e/nvfp4-g7e/0123456789/", "runs/g7e/nvfp4-l40s/9876543210/"
OUT = "runs/g7e/report/feedc0ffee/"
FAST = ["--poll-s", "0.2", "--max-poll-s", "0.4", "--log-every-s", "0.3"]


def finish(folder: Path, *, interrupted_after: int | None = None) -> bytes:
    """Give a sweep folder the manifest its sweep writes: every run valid and the sweep ended, or (with
    `interrupted_after`) the first N runs valid, the rest pending and the session interrupted, as
    the sweep leaves it on SIGTERM. Returns the manifest's bytes."""
    manifest = json.loads((folder / "manifest.json").read_text())
    results = sorted(p.name for p in folder.glob("S*_c*.json"))
    runs = []
    for index, name in enumerate(results):
        scenario, conc = name[:-len(".json")].rsplit("_c", 1)
        pending = interrupted_after is not None and index >= interrupted_after
        runs.append({"scenario": scenario, "concurrency": int(conc), "status": "pending" if pending else "valid",
                     "reason": None})
    session = {"started_at": "2026-12-01T00:00:00Z", "finished_at": "2026-12-01T02:00:00Z"}
    if interrupted_after is not None:
        session["interrupted"] = "signal 15"
    manifest.update(runs=runs, sessions=[session], started_at=session["started_at"],
                    finished_at=None if interrupted_after is not None else session["finished_at"])
    body = json.dumps(manifest, indent=2).encode()
    (folder / "manifest.json").write_bytes(body)
    return body


def upload(client, folder: Path, prefix: str, *, skip=()) -> None:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel not in skip:
            client.upload_file(str(path), BUCKET, prefix + rel)


@pytest.fixture
def results(aws, tmp_path):
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    cand = recorded_sweep(tmp_path, "nvfp4-g7e", G7E, CAND, instance_type="g7e.2xlarge", price=1.5,
                          capacity_type="spot")
    base = recorded_sweep(tmp_path, "nvfp4-l40s", {s: v for s, (v, _) in L40S.items()}, BASE,
                          instance_type="g6e.2xlarge", price=2.76, capacity_type="on-demand")
    return client, cand, base


def publish(*extra: str, charts: bool = False) -> int:
    return PUB.main([*([] if charts else ["--no-charts"]), "--candidate", f"s3://{BUCKET}/{CAND}", "--baseline", f"s3://{BUCKET}/{BASE}",
                     "--current-replicas", "12", "--basis", "peak", "--out", f"s3://{BUCKET}/{OUT}",
                     *FAST, *extra])


def test_waits_for_late_and_interrupted_sweeps_then_reports(results, capsys):
    client, cand, base = results
    finish(base)
    upload(client, base, BASE)
    final = finish(cand)
    half = cand.parent / "half"
    half.mkdir()
    for path in cand.rglob("*"):
        if path.is_file():
            (half / path.relative_to(cand)).parent.mkdir(parents=True, exist_ok=True)
            (half / path.relative_to(cand)).write_bytes(path.read_bytes())
    stale = finish(half, interrupted_after=10)
    pending = {f"{r['scenario']}_c{r['concurrency']}.json"
               for r in json.loads(stale)["runs"] if r["status"] == "pending"}
    seen_states, written_early = [], []

    def arrive_late():
        time.sleep(1.0)  # the candidate's Job has not started yet
        upload(client, half, CAND, skip=pending)  # Spot interruption: 10 runs done, manifest says pending
        time.sleep(2.5)  # several looks at the manifests; a report would be written by now
        written_early.extend(s3_files(client, OUT))
        status = json.loads(client.get_object(Bucket=BUCKET, Key=OUT + "status.json")["Body"].read())
        seen_states.append({s["label"]: s["state"] for s in status["sweeps"]})
        upload(client, cand, CAND)  # the next pod resumed and finished the sweep

    thread = threading.Thread(target=arrive_late)
    thread.start()
    try:
        assert publish() == 0
    finally:
        thread.join()
    # Nothing but its status while a sweep was interrupted: the report is never written half done.
    assert written_early == ["status.json"]
    out = capsys.readouterr().out
    assert "g7e/nvfp4-g7e: no results yet" in out
    assert "nvfp4-g7e: interrupted (10 of 28 combinations), waiting for its Job to resume it" in out
    assert "every sweep has finished" in out
    # While it waited, status.json said so (bench open shows it).
    assert seen_states == [{"nvfp4-g7e": "interrupted", "nvfp4-l40s": "finished"}]

    written = s3_files(client, OUT)
    assert {"report.md", "summary.json", "plan.md", "plan.json", "inputs.json", "status.json",
            "plan/plan.md"} <= set(written)
    summary = json.loads(written["summary.json"])
    # Reported from the finished sweep: every run of both sides counts, none "not run".
    assert all(r["valid"] for r in summary["runs"]) and len(summary["runs"]) == 28
    assert summary["verdict"]["pass"] is True and summary["verdict"]["min_ratio"] == pytest.approx(3.49, abs=0.01)
    inputs = json.loads(written["inputs.json"])
    by_role = {s["role"]: s for s in inputs["sweeps"]}
    assert by_role["candidate"]["manifest_sha256"] == hashlib.sha256(final).hexdigest()
    assert inputs["complete"] is True and [c["command"] for c in inputs["commands"]] == ["report", "plan"]
    # The commands it ran name the sweeps by their S3 addresses.
    assert f"s3://{BUCKET}/{CAND}" in inputs["commands"][0]["argv"]
    assert json.loads(written["status.json"])["state"] == "written"
    plan = json.loads(written["plan.json"])
    assert plan["configurations"][0]["replicas"] == 4
    assert "Verdict PASS for nvfp4-g7e against nvfp4-l40s on the peak basis: smallest per-GPU ratio 3.49x" in out
    assert "Plan on the peak basis: nvfp4-g7e 4 replicas (today 12)." in out


def test_a_rerun_writes_nothing_until_a_sweep_changes(results, capsys):
    client, cand, base = results
    for folder, prefix in ((cand, CAND), (base, BASE)):
        finish(folder)
        upload(client, folder, prefix)
    assert publish() == 0
    first = json.loads(s3_files(client, OUT)["inputs.json"])
    capsys.readouterr()
    assert publish() == 0
    assert "already holds the report of these sweeps" in capsys.readouterr().out
    assert json.loads(s3_files(client, OUT)["inputs.json"])["written_at"] == first["written_at"]
    # The candidate's sweep is resumed once more (a new session): its report is written again.
    manifest = json.loads((cand / "manifest.json").read_text())
    manifest["sessions"].append({"started_at": "2026-12-01T03:00:00Z", "finished_at": "2026-12-01T03:01:00Z"})
    client.put_object(Bucket=BUCKET, Key=CAND + "manifest.json", Body=json.dumps(manifest).encode())
    assert publish() == 0
    again = json.loads(s3_files(client, OUT)["inputs.json"])
    cand_digest = {s["role"]: s["manifest_sha256"] for s in again["sweeps"]}["candidate"]
    assert cand_digest == hashlib.sha256(json.dumps(manifest).encode()).hexdigest()
    assert cand_digest != {s["role"]: s["manifest_sha256"] for s in first["sweeps"]}["candidate"]


def test_after_the_wait_it_reports_what_is_there_and_says_so(results, capsys):
    client, cand, base = results
    finish(base)
    upload(client, base, BASE)
    stale = json.loads(finish(cand, interrupted_after=5))
    pending = {f"{r['scenario']}_c{r['concurrency']}.json" for r in stale["runs"] if r["status"] == "pending"}
    upload(client, cand, CAND, skip=pending)  # never resumed: its Job gave up
    assert publish("--wait-hours", "0.0005") == 0
    out = capsys.readouterr().out
    assert "gave up waiting" in out and "nvfp4-g7e: interrupted (5 of 28 combinations)" in out
    written = s3_files(client, OUT)
    assert json.loads(written["inputs.json"])["complete"] is False
    summary = json.loads(written["summary.json"])
    assert summary["verdict"]["pass"] is False  # never passes on runs that did not finish


@pytest.mark.parametrize("argv, message", [
    (["--baseline", "s3://b/x/", "--out", "s3://b/r/"], "give --candidate"),
    (["--candidate", "s3://b/c/", "--baseline", "s3://b/x/", "--out", "s3://b"], "--out: s3://b/ has no prefix"),
    (["--candidate", "/local/dir", "--baseline", "s3://b/x/", "--out", "s3://b/r/"], "--candidate: expected s3://"),
    (["--variant", "s3://b/v/", "--baseline", "s3://b/x/", "--out", "s3://b/r/"], "at least two"),
    (["--candidate", "s3://b/c/", "--baseline", "s3://b/x/", "--out", "s3://b/r/", "--poll-s", "0"],
     "argument --poll-s: 0 cannot be right: give a number above 0"),
    (["--candidate", "s3://b/c/", "--out", "s3://b/r/"], "give --baseline"),
])
def test_bad_arguments_exit_2_naming_the_flag(argv, message, capsys):
    assert PUB.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_open_before_and_after_the_report(results, tmp_path, capsys, monkeypatch):
    client, cand, base = results
    output = json.dumps({"uri": f"s3://{BUCKET}/{OUT}", "state": None})
    dest = tmp_path / "opened"
    # Before the Job wrote anything, and while it waits: no failure shown as an answer.
    assert opener.main([output, "--out", str(dest), "--no-progress"]) == 1
    assert "nothing there yet: the report Job writes it once the bench sweeps have finished" in capsys.readouterr().err
    client.put_object(Bucket=BUCKET, Key=OUT + "status.json", Body=json.dumps({
        "state": "waiting", "updated_at": "2026-12-01T01:00:00Z",
        "sweeps": [{"label": "nvfp4-g7e", "state": "running", "combinations_done": 14, "combinations_planned": 28}]}))
    assert opener.main([output, "--out", str(dest), "--no-progress"]) == 1
    assert "the report Job is waiting (as of 2026-12-01T01:00:00Z): nvfp4-g7e running, 14 of 28" \
        in capsys.readouterr().err

    for folder, prefix in ((cand, CAND), (base, BASE)):
        finish(folder)
        upload(client, folder, prefix)
    assert publish(charts=True) == 0
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO(output))
    assert opener.main(["-", "--out", str(dest), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == str((dest / "report.html").resolve())  # the page, where the report has one
    assert lines[2].startswith("Verdict PASS for nvfp4-g7e against nvfp4-l40s")
    assert lines[3] == "Plan on the peak basis: nvfp4-g7e 4 replicas (today 12)."
    assert files(dest) == s3_files(client, OUT)
    assert {"chart_S1_chat.png", "plan.png", "inputs.json", "report.html", "plan.html"} <= set(files(dest))
    # Default folder: build/open/<stack>/<hash>
    monkeypatch.chdir(tmp_path)
    assert opener.main([f"s3://{BUCKET}/{OUT}", "--no-progress"]) == 0
    assert (tmp_path / "build" / "open" / "g7e" / "feedc0ffee" / "report.md").is_file()


def test_open_refuses_what_is_not_a_report_address(capsys):
    assert opener.main(['{"state": "pass"}']) == 2
    assert 'no "uri"' in capsys.readouterr().err
    assert opener.main(["runs/g7e"]) == 2
    assert "expected a report folder, the stack output `report` as JSON or an s3:// prefix" in capsys.readouterr().err


def test_the_plan_waits_for_the_mixed_traffic_check_and_says_whether_it_held(results, fake_bench, monkeypatch,
                                                                              capsys):
    """Both Jobs' entry points at once: publish writes the plan, mix-check waits for it, runs the mix on
    the (fake) server and writes its finding beside it, publish plans again with it."""
    from bench.run import mixcheck

    client, cand, base = results
    for folder, prefix in ((cand, CAND), (base, BASE)):
        finish(folder)
        upload(client, folder, prefix)
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    out_uri = f"s3://{BUCKET}/{OUT}"
    codes = []

    def the_check_job():
        codes.append(mixcheck.main(["--plan", out_uri, "--wait-hours", "0.02", "--poll-s", "0.2",
                                    "--base-url", "http://127.0.0.1:9", "--model", "tiny", "--tokenizer", "/tokenizer",
                                    "--configuration", "nvfp4-g7e", "--out", out_uri, "--vllm-bin", fake_bench.bin,
                                    "--duration-s", "2", "--no-progress"]))

    thread = threading.Thread(target=the_check_job)
    thread.start()
    try:
        assert publish("--mix", "S1_chat=0.7,S4_rag=0.3", "--mixed-traffic-wait-hours", "0.02") == 0
    finally:
        thread.join()
    assert codes == [0]
    out = capsys.readouterr().out
    assert "waiting for the plan" in out and "mixed traffic: the scenarios add up" in out
    written = s3_files(client, OUT)
    assert {"mixed_traffic.json", "mixed/S1_chat.json", "mixed/S4_rag.json"} <= set(written)
    plan = json.loads(written["plan.json"])
    assert plan["mixed_traffic"]["held"] is True
    assert plan["mixed_traffic"]["per_replica_req_s"] == plan["configurations"][0]["per_replica_req_s"]
    assert "the assumption held" in written["plan.md"].decode()
    inputs = json.loads(written["inputs.json"])
    assert inputs["mixed_traffic"] == "included"
    assert [c["command"] for c in inputs["commands"]] == ["report", "plan", "plan"]
    assert "--mixed-traffic" in inputs["commands"][-1]["argv"]


def test_s3_trouble_exits_1_without_a_traceback(aws, capsys):
    # No such bucket (a typo, or the stack's bucket not created yet): the Job's retry may help.
    assert PUB.main(["--candidate", "s3://nowhere-bucket/runs/a/", "--baseline", "s3://nowhere-bucket/runs/b/",
                     "--out", "s3://nowhere-bucket/runs/report/x/", *FAST]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bench publish: S3: ") and "NoSuchBucket" in err and "Traceback" not in err


def test_sigterm_while_waiting_stops_at_once_and_says_what_stays(results, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-m", "bench", "publish", "--candidate", f"s3://{BUCKET}/{CAND}",
                             "--baseline", f"s3://{BUCKET}/{BASE}", "--out", f"s3://{BUCKET}/{OUT}", "--poll-s",
                             "600"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    client = results[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "status.json" not in s3_files(client, OUT):
        time.sleep(0.2)  # it has looked once and is waiting
    proc.send_signal(signal.SIGTERM)
    # It would sleep 10 minutes before its next look: ending well inside a minute is the signal's doing.
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM" in err and "Rerun the same command" in err and "Traceback" not in err
    assert "waiting" in out


def test_the_slo_flags_given_to_publish_reach_every_step_and_none_otherwise():
    import argparse

    def steps(*argv):
        parser = argparse.ArgumentParser()
        PUB.add_parser(parser.add_subparsers())
        args = parser.parse_args(["publish", "--baseline", "s3://b/base/", "--candidate", "s3://b/cand/",
                                  "--out", "s3://b/out/", *argv])
        local = {"candidate": "/c", "baseline": "/b", "variant:00": "/v0", "variant:01": "/v1"}
        return {name: argv for name, argv, _ in PUB._commands(args, local, "s3://b/out/")}

    given = steps("--slo-itl-p99-ms", "100", "--slo-decode-metric", "tpot")
    assert set(given) == {"report", "plan", "compare"}
    for argv in given.values():
        assert argv[argv.index("--slo-itl-p99-ms") + 1] == "100" and "--slo-ttft-p99-ms" not in argv
        assert argv[argv.index("--slo-decode-metric") + 1] == "tpot"
    # without flags each step judges with the SLO the sweeps recorded
    assert not any(a.startswith("--slo-") for argv in steps().values() for a in argv)
