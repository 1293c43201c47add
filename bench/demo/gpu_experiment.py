"""`python -m bench gpu-check --experiment NAME`: one of the PoC's experiments, one change at a time, as one
command on a GPU machine.

Each experiment is data (bench/demo/experiments.py: its variants, scenarios, concurrencies and the seeds'
figure it is set beside). For each variant asked for (--variants, default all) the command says whether its
start should compile (`cache_warm`: no start that --out records had the same compile-cache key), starts one
server on --out's compile cache (a gpu-check run's; the first start without one compiles), records its start
(seconds to /health, compile cache hit or miss, KV cache tokens and GiB, the attention backend), runs
`python -m bench sweep` against it and stops it. Then `python -m bench compare` over every variant swept so
far in --out (variants run by earlier commands included), which names a winner only outside the noise; a
variant swept again from a fresh server (--again) enters it with every finished sweep, as repeats of one
variant.

Each scenario is swept on its own (one `bench sweep` per variant and scenario), and compared on its own,
so a long experiment splits over commands of under ten minutes with --variants and --scenarios: what an
earlier command swept in --out stays and joins the comparison, and a sweep a command's time limit cut off
continues (`bench sweep --resume`) when the same command runs again. It writes experiments/NAME/:
experiment.json (the record), experiment.md, VARIANT/SCENARIO/ (a sweep), VARIANT/server-N.log and
compare/SCENARIO/ (compare.md, compare.json, compare.html). The record is saved after each sweep, so a
command cut off by a time limit keeps what it finished. Processes end with the command: nothing runs
in the background.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from bench.analysis import capacity_report as CR
from bench.analysis import results as R
from bench.analysis.capacity import interval as CAP
from bench.analysis import side as SD
from bench.analysis.opener import read_object
from bench.common.interrupts import run_logged, signal_name
from bench.demo import full_model, gpu_full, gpu_mixed, gpu_page, gpu_settings
from bench.demo.experiments import EXPERIMENTS, Experiment, Variant
from bench.demo import gpu_steps as S

KIND = "vllm-poc/gpu-experiment"
VERSION = 1


def _listed(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def check_args(args: argparse.Namespace, error: type[Exception]) -> None:
    name = getattr(args, "experiment", None)
    if name is None:
        for flag, value in (("--variants", getattr(args, "variants", None)),
                            ("--scenarios", getattr(args, "scenarios", None)),
                            ("--again", getattr(args, "again", False))):
            if value:
                raise error(f"{flag}: only with --experiment NAME")
        return
    experiment = EXPERIMENTS[name]
    labels = _listed(args.variants) or [v.label for v in experiment.variants]
    unknown = [v for v in labels if experiment.variant(v) is None]
    if unknown:
        raise error(f"--variants {args.variants}: experiment {name} has {', '.join(v.label for v in experiment.variants)}")
    scenarios = _listed(getattr(args, "scenarios", None)) or list(experiment.scenarios)
    unknown = [s for s in scenarios if s not in experiment.scenarios]
    if unknown:
        raise error(f"--scenarios {args.scenarios}: experiment {name} sweeps {', '.join(experiment.scenarios)}")
    if not gpu_full.full(args) and any(experiment.variant(v).override for v in labels):
        raise error(f"--experiment {name}: its variants change the full-size model's flags; add --model-shape "
                    f"{full_model.SHAPE}")
    budget = getattr(args, "budget_minutes", None)
    if budget is not None and not budget > 0:
        raise error(f"--budget-minutes {budget:g}: give the GPU minutes each sweep may spend, above 0")
    width = getattr(args, "target_width", None)
    if width is not None and not width > 1:
        raise error(f"--target-width {width:g}: give hi / lo of the capacity's ends, above 1 (the sweep's is 1.22)")
    args.variant_list, args.scenario_list = labels, scenarios


# gpu-check's own servers run with sleep mode (its sleep_wake check needs it); an experiment's servers run as
# the stack's do by default, without it. Sleep mode's allocator sized the KV cache 4.6 GiB past the
# utilization's share, and warm starts with it ran out of GPU memory under S2_summary at c=16 on the H100
# where starts without it served c=64 (docs/records/experiment-sleep-mode-2026-12-06-h100-paired). The
# sleep-mode experiment's sleep-on variant adds it back.
GPU_CHECK_ONLY = ("--enable-sleep-mode",)


def variant_flags(check, variant: Variant) -> list[str]:
    flags = check.flags(**variant.override) if variant.override else check.flags()
    return [f for f in flags if f not in GPU_CHECK_ONLY and f not in variant.drop] + list(variant.extra)


# `vllm serve` flags (and how many values follow each) that vLLM 0.26.0's compile-cache key does not take:
# the records' starts at another utilization, or with prefix caching on after a start with it off, hit the
# cache; the scheduler's only factor is max_num_batched_tokens. Sleep mode and --max-num-seqs (its CUDA graph
# sizes) are factors: docs/full-size.md, "Commands on a GPU machine".
KEYLESS_FLAGS = {"--gpu-memory-utilization": 1, "--enable-prefix-caching": 0, "--no-enable-prefix-caching": 0,
                 "--scheduling-policy": 1,
                 "--no-enable-sleep-mode": 0}  # vLLM's default, as if absent (sleep mode itself is a factor)


def cache_key_flags(flags: list[str]) -> tuple[str, ...]:
    """The flags that can change vLLM's compile-cache key: `flags` without KEYLESS_FLAGS and their values."""
    kept, skip = [], 0
    for flag in flags:
        if skip:
            skip -= 1
        elif flag in KEYLESS_FLAGS:
            skip = KEYLESS_FLAGS[flag]
        else:
            kept.append(flag)
    return tuple(kept)


WARM, COLD, FIRST, UNKNOWN = "warm", "cold", "first", "unknown"


def cache_warm(check, flags: list[str]) -> str:
    """Whether a start that --out records (an experiment's variant, or gpu-check's cold start with the default
    flags) ran with the same compile-cache key as `flags`: WARM, its cache should serve them; COLD, they
    compile; FIRST, --out records no start; UNKNOWN, its starts' flags are not recorded (older records)."""
    key, seen, blind = cache_key_flags(flags), False, False
    mine = check.record["model_choice"]
    earlier = read_object(check.out / "gpu-check.json") or {}
    if (earlier.get("checks") or {}).get("cold_start", {}).get("status") == "ok" \
            and earlier.get("model_choice") == mine:
        seen = True
        if cache_key_flags(check.flags()) == key:
            return WARM
    for path in sorted((check.out / "experiments").glob("*/experiment.json")):
        record = read_object(path)
        if record is None or record.get("model_choice") not in (None, mine):
            continue
        for entry in (record.get("variants") or {}).values():
            if not entry.get("starts"):
                continue
            seen = True
            if not entry.get("flags"):
                blind = True
            elif cache_key_flags(entry["flags"]) == key:
                return WARM
    return UNKNOWN if blind else COLD if seen else FIRST


CACHE_WORDS = {
    FIRST: "--out records no start yet: this one compiles (a cold start)",
    WARM: "a start --out records had the same compile-cache key: this one should start warm",
    COLD: "its flags change vLLM's compile-cache key from every start --out records (sleep mode, --max-num-seqs, "
          "precision or TP): this start compiles (a cold start)",
    UNKNOWN: "--out records starts without their flags: whether this one compiles is not known before it starts",
}


def points(check, experiment: Experiment, scenario: str) -> tuple[int, ...]:
    """The experiment's own concurrencies for a scenario, or --concurrencies when it was given."""
    if getattr(check.args, "concurrencies_given", False):
        return tuple(check.args.concurrency_list)
    return experiment.scenarios[scenario]


def sweep_argv(check, experiment: Experiment, variant: Variant, flags: list[str], scenario: str,
               folder: Path) -> list[str]:
    args = check.args
    argv = [check.runtime.python, "-m", "bench", "sweep", "--base-url", check.server.url, "--model", check.server.name,
            "--tokenizer", str(check.model_dir), "--out", str(folder), "--scenarios", scenario,
            "--concurrencies", ",".join(map(str, points(check, experiment, scenario))),
            "--length-scale", f"{args.length_scale:g}", "--health-timeout-s", "60", "--instance-type", args.instance_type,
            "--gpus", str(gpu_full.tp_of(flags)), "--label", variant.label, "--server-args", shlex.join(flags),
            "--vllm-bin", str(check.vllm_wrapper()), "--window-s", f"{args.window_s:g}",
            # one long-lived client: a process per run would import vLLM again before every run and burst
            "--bench-client", "library"]
    if getattr(args, "budget_minutes", None):
        argv += ["--budget-minutes", f"{args.budget_minutes:g}"]
    if not experiment.capacity_search:
        return argv
    argv.append("--capacity-search")
    if getattr(args, "target_width", None):
        argv += ["--target-width", f"{args.target_width:g}"]
    return argv


def runs_of(folder: Path) -> list[dict[str, Any]]:
    """Every run of one sweep the page lists: the grid's (valid or not), then the capacity search's and the
    open loop's valid runs, each with its kind ("grid", "search", "open loop"), its file, its load
    (concurrency; the offered rate for the open loop), output tok/s, TTFT and ITL p99 and validity."""
    def row(run: R.RunResult, kind: str, rate: float | None = None) -> dict[str, Any]:
        return {"scenario": run.scenario, "kind": kind, "file": CAP.run_file(run), "concurrency": run.concurrency, "rate": rate,
                "valid": run.valid, "output_tok_s": run.output_tok_s, "ttft_p99_ms": run.ttft_p99_ms,
                "itl_p99_ms": run.itl_p99_ms, "reason": run.reason or None}

    # the manifest's points, a failed one too (its last attempt's file and reason), and any result file beside
    # them, as `bench report` reads them (a missing or unreadable manifest leaves the result files alone)
    grid = [row(run, "grid") for run in SD.load_side(folder).runs]
    out = sorted(grid, key=lambda r: r["concurrency"])
    for by_c in CR.search_runs(folder).values():
        for c in sorted(by_c):
            out += [row(run, "search") for run, _ in by_c[c]]
    for by_rate in CR.open_loop_runs(folder).values():
        for rate, runs in by_rate.items():
            out += [row(run, "open loop", rate) for run, _ in runs]
    return out


def sweep_capacity(folder: Path | list[Path], scenario: str) -> dict[str, Any] | None:
    """The sweep's capacity under the SLO it recorded, by the function `bench compare` and `bench report` use:
    {"closed": the closed loop's interval, "open": the open loop's where it ran} (Capacity.as_dict); None for
    a folder with no usable run or an SLO it cannot tell. Several folders (one variant's sweeps, each from a
    fresh server) give their pooled capacity, as `bench compare` pools a variant's repeats."""
    folders = folder if isinstance(folder, list) else [folder]
    try:
        sides = [SD.load_side(f, label=f.parent.name) for f in folders]
        slo = SD.choose_slo([(f.name, side.manifest) for f, side in zip(folders, sides)], {}, SD.SLO_FLAGS)
    except (SD.SloConflict, OSError, ValueError, KeyError, TypeError):  # a sweep folder it cannot read: no figure
        return None
    got = CR.sides_capacity(sides, ttft_ms=slo.ttft_p99_ms, decode_ms=slo.decode_p99_ms,
                            decode_metric=slo.decode_metric).get(scenario) or {}
    return {loop: got[loop].as_dict() for loop in ("closed", "open") if got.get(loop) is not None} or None


def start_words(start: dict[str, Any]) -> str:
    """A start's figures for the variant's line; what the server did not report says so."""
    kv = start.get("kv_cache_tokens")
    warning = gpu_full.memory_warning(start)
    return (f"/health {start['healthy_s']:g} s" if start.get("healthy_s") is not None else "/health not reached") + \
        f", KV cache {f'{kv:,} tokens' if kv else 'not reported'}, attention {start.get('attention_backend') or 'not reported'}" + \
        (f"; {warning}" if warning else "")


def swept(entry: dict[str, Any], folder: Path, scenario: str) -> bool:
    """Whether an earlier command finished this variant's sweep of `scenario` (bench sweep exit 0, its folder
    kept)."""
    sweep = (entry.get("sweeps") or {}).get(scenario) or {}
    return sweep.get("rc") == 0 and (folder / scenario / "manifest.json").is_file()


def set_aside(entry: dict[str, Any], folder: Path, scenario: str) -> None:
    """--again: this command measures `scenario` anew; what an earlier command measured (finished or cut off)
    moves to SCENARIO.earlier-N beside it, and its record entry to the variant's `earlier` list, so nothing
    measured is lost and the comparison takes the new sweep."""
    sweep = folder / scenario
    done = (entry.get("sweeps") or {}).pop(scenario, None)
    if not sweep.exists() and done is None:
        return
    n = 1
    while (folder / f"{scenario}.earlier-{n}").exists():
        n += 1
    if sweep.exists():
        sweep.rename(folder / f"{scenario}.earlier-{n}")
    entry.setdefault("earlier", []).append({"scenario": scenario, "dir": str(folder / f"{scenario}.earlier-{n}"),
                                            **{k: v for k, v in (done or {}).items() if k != "dir"}})


def finished(experiment: Experiment, entry: dict[str, Any], folder: Path, scenarios: list[str]) -> bool:
    """Whether the variant has all it is asked for from earlier commands: every scenario swept and, where the
    experiment has one, its mixed load measured. Such a variant needs no server start."""
    return (entry.get("status") == "ok" and all(swept(entry, folder, s) for s in scenarios)
            and (not experiment.mixed or (entry.get("mixed") or {}).get("status") == "ok"))


def sweep_scenario(check, argv: list[str], folder: Path, scenario: str, entry: dict[str, Any],
                   save: Callable[[], None], *, gpus: int) -> None:
    """`bench sweep` of one scenario into folder/SCENARIO, recorded in `entry["sweeps"]` with its runs and the
    capacity they give. A sweep an earlier command left unfinished continues (--resume). One a stop cuts off
    (a command's time limit) is recorded too, as far as it got (`cut_off`), before the stop goes on: its
    finished runs and their capacity are on the page, and the same command continues it."""
    sweep = folder / scenario
    resume = (sweep / "manifest.json").is_file()
    if not resume:
        shutil.rmtree(sweep, ignore_errors=True)
    t0 = time.monotonic()

    def keep(rc: int | None) -> None:
        entry["sweeps"][scenario] = {"dir": str(sweep), "rc": rc, "runs": runs_of(sweep),
                                     "capacity": sweep_capacity(sweep, scenario),
                                     "seconds": round(time.monotonic() - t0, 1), "gpus": gpus, "resumed": resume,
                                     **({"cut_off": True} if rc is None else {})}
        folders = repeats(entry, folder, scenario)
        if rc == 0 and len(folders) > 1:  # a repeat from a fresh server: the variant's capacity over them all
            entry["sweeps"][scenario]["pooled"] = {"sweeps": [f.name for f in folders],
                                                   "capacity": sweep_capacity(folders, scenario)}
        save()

    try:
        rc = run_logged(argv + (["--resume"] if resume else []), folder / f"sweep-{scenario}.log",
                        env=check.runtime.env)
    except KeyboardInterrupt:
        keep(None)
        raise
    keep(rc)


def run_variant(check, experiment: Experiment, variant: Variant, root: Path, entry: dict[str, Any],
                save: Callable[[], None], record: dict[str, Any] | None = None) -> None:
    """Start the variant's server, sweep each scenario asked for into VARIANT/SCENARIO/, run the experiment's
    mixed load if it has one, stop it; `entry` (the record's, kept from earlier commands) gets this start, each
    sweep and the mixed load, `save` writes the record."""
    folder = root / variant.label
    folder.mkdir(parents=True, exist_ok=True)
    flags = variant_flags(check, variant)
    tp = gpu_full.tp_of(flags)
    entry.update(flags=flags, tensor_parallel_size=tp)
    if tp > max(check.runtime.gpus, 1):
        entry.update(status="not available", reason=f"needs {tp} GPUs; this machine shows {check.runtime.gpus}")
        return
    entry.setdefault("starts", [])
    entry.setdefault("sweeps", {})
    again = bool(getattr(check.args, "again", False))
    check.stop_server()
    try:
        check.server = check.start(check.pod(f"{experiment.name}-{variant.label}"), flags=flags)
        check.server_name = variant.label
        start = {k: v for k, v in check.start_figures(check.server, variant.label).items()
                 if k not in ("startup_record", "milestones_s", "log")}
        entry["starts"].append(start)
        save()
        if check.full and (problems := gpu_full.start_problems(start, check.args, **variant.override)):
            raise S.Broken("; ".join(problems))
        died = None
        for scenario in check.args.scenario_list:
            if again:
                set_aside(entry, folder, scenario)
            elif swept(entry, folder, scenario):
                continue  # an earlier command's finished sweep is kept (--again measures it anew)
            sweep_scenario(check, sweep_argv(check, experiment, variant, flags, scenario, folder / scenario),
                           folder, scenario, entry, save, gpus=tp)
            if (died := server_death(check.server, scenario, len(entry["starts"]))) is not None:
                break  # the next scenario's sweep would only wait for a server that is gone
        bad = [s for s, v in entry["sweeps"].items() if v["rc"] != 0 and not v.get("cut_off")]
        entry.update(status="broken" if bad or died else "ok",
                     reason=died or (f"bench sweep failed for {', '.join(f'{s} (sweep-{s}.log)' for s in bad)}"
                                     if bad else None))
        if experiment.mixed and not bad and record is not None:
            # every scenario of the experiment, not only this command's --scenarios: a load of fewer would
            # measure another mix, and an earlier command's sweeps give their saturation rates too
            entry["mixed"] = gpu_mixed.run(check, experiment.mixed, variant.label, folder, record,
                                           list(experiment.scenarios))
            if entry["mixed"]["status"] == "broken":
                entry.update(status="broken", reason=f"mixed load: {entry['mixed']['reason']}")
            save()
    except S.StepEnd as exc:
        entry.update(status="broken", reason=str(exc).splitlines()[0][:400])
    finally:
        check.stop_server()
        log = check.logs / f"server-{experiment.name}-{variant.label}.log"
        if log.is_file():
            shutil.copy(log, folder / f"server-{len(entry.get('starts', []))}.log")


def server_death(server, scenario: str, start: int) -> str | None:
    """Why the variant's server is gone after a sweep, in one sentence naming the cause from its log (an engine
    that ran out of GPU memory under load kills the server, and every later run fails to connect); None while it
    runs."""
    if server is None or server.proc.poll() is None:
        return None
    try:
        text = server.log.read_text(errors="replace")  # the cause may lie far above the requests' tracebacks
    except OSError:
        text = ""
    return (f"the vLLM server exited ({server.proc.returncode}) during the {scenario} sweep: "
            f"{S.last_error(text)} (server-{start}.log; the runs after it failed to connect, "
            f"sweep-{scenario}.log)")


def compare(check, experiment: Experiment, record: dict[str, Any], root: Path, scenario: str) -> dict[str, Any]:
    """`bench compare` of one scenario over every variant that swept it, in the experiment's order."""
    sweeps = {v.label: ((record["variants"].get(v.label) or {}).get("sweeps") or {}).get(scenario)
              for v in experiment.variants}
    # a sweep a stop cut off is on the page as far as it got, but compared only once finished
    done = [label for label, sweep in sweeps.items()
            if sweep is not None and not sweep.get("cut_off") and (root / label / scenario).is_dir()]
    if len(done) < 2:
        return {"status": "waiting", "reason": f"{len(done)} variant{'s' if len(done) != 1 else ''} swept so far; "
                                              "a comparison needs two"}
    out = root / "compare" / scenario
    folders = [(label, f) for label in done
               for f in repeats(record["variants"].get(label) or {}, root / label, scenario)]
    proc = subprocess.run([sys.executable, "-m", "bench", "compare", *[str(f) for _, f in folders],
                           "--labels", ",".join(label for label, _ in folders), "--out", str(out)],
                          env=check.runtime.env, capture_output=True, text=True)
    (root / f"compare-{scenario}.log").write_text(proc.stdout + proc.stderr)
    result: dict[str, Any] = {"status": "ok" if proc.returncode == 0 else "broken", "rc": proc.returncode,
                              "dir": str(out), "variants": done,
                              "sweeps": {label: sum(1 for v, _ in folders if v == label) for label in done},
                              "said": (proc.stdout.strip().splitlines() or [""])[-1][:400]}
    if (out / "compare.json").is_file():
        data = json.loads((out / "compare.json").read_text())
        result.update(cells=[{k: c.get(k) for k in ("concurrency", "output_tok_s", "output_tok_s_sweeps", "winner",
                                                     "winner_margin_pct", "noise_pct", "leaders", "behind")}
                             for c in data.get("cells", [])],
                      slo_capacity=(data.get("slo_capacity") or {}).get(scenario),
                      slo_capacity_interval=(data.get("slo_capacity_interval") or {}).get(scenario),
                      slo_capacity_winner=(data.get("slo_capacity_winner") or {}).get(scenario),
                      incomplete=data.get("incomplete"))
    return result


def repeats(entry: dict[str, Any], folder: Path, scenario: str) -> list[Path]:
    """A variant's (its record `entry`, its `folder`) finished sweeps of `scenario`, each from its own server:
    those `--again` set aside (oldest first), then the latest. bench compare pools them as one variant's
    repeats. The record names the folders where the box had them: they are read beside the latest."""
    earlier = [folder / Path(str(e.get("dir"))).name for e in entry.get("earlier") or []
               if e.get("scenario") == scenario and e.get("rc") == 0 and not e.get("cut_off")]
    return [f for f in earlier if (f / "manifest.json").is_file()] + [folder / scenario]


def run(check, name: str) -> int:
    """The experiment on `check` (a gpu-check Check, its runtime probed): 0 every variant and comparison asked for
    ran; 1 one broke; 2 --out holds this experiment for another model."""
    experiment = EXPERIMENTS[name]
    root = check.out / "experiments" / name
    root.mkdir(parents=True, exist_ok=True)
    path = root / "experiment.json"
    record = json.loads(path.read_text()) if path.is_file() else {}
    mine = check.record["model_choice"]
    if record.get("model_choice") not in (None, mine):
        print(f"bench gpu-check: --experiment {name}: {path} holds variants of {gpu_full.describe(record['model_choice'])}"
              f", this run asks for {gpu_full.describe(mine)}; give another --out", file=sys.stderr)
        return 2
    record.update({"kind": KIND, "version": VERSION, "experiment": name, "question": experiment.question,
                   "seeds": experiment.seeds, "model_choice": mine, "device": check.record["device"],
                   "versions": check.record["versions"], "transformers_trap": check.record["transformers_trap"],
                   "capacity_search": experiment.capacity_search, "env": gpu_settings.server_env("<cache root>")})
    record.setdefault("scenarios", {})
    record["scenarios"].update({s: list(points(check, experiment, s)) for s in check.args.scenario_list})
    record.setdefault("variants", {})
    record.setdefault("compare", {})
    record.setdefault("started_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def save() -> None:
        path.write_text(json.dumps(record, indent=2) + "\n")

    def publish() -> None:
        """The record and its page, which always say the same."""
        save()
        (root / "experiment.md").write_text(gpu_page.experiment_markdown(record))

    print(f"gpu-check: experiment {name}: {experiment.question}; variants {', '.join(check.args.variant_list)}, "
          f"scenarios {', '.join(check.args.scenario_list)} (about {experiment.minutes:g} min a variant with every "
          "scenario on an H200, compile cache warm)", flush=True)
    try:
        record["model"] = gpu_full.model_record(check.build_model(), check.args)
    except S.StepEnd as exc:
        print(f"gpu-check: experiment {name}: BROKEN model: {str(exc).splitlines()[0][:400]}", file=sys.stderr)
        return 1
    for label in check.args.variant_list:
        print(f"gpu-check: experiment {name}: {label} ...", flush=True)
        entry = record["variants"].setdefault(label, {})
        if not getattr(check.args, "again", False) and finished(experiment, entry, root / label,
                                                                 check.args.scenario_list):
            print(f"gpu-check: experiment {name}: {label}: kept from an earlier command (every scenario asked for "
                  "is swept; --again measures it anew)", flush=True)
            continue
        before = len(entry.get("starts") or [])
        print(f"gpu-check: experiment {name}: {label}: "
              f"{CACHE_WORDS[cache_warm(check, variant_flags(check, experiment.variant(label)))]}", flush=True)
        try:
            run_variant(check, experiment, experiment.variant(label), root, entry, save, record)
        except KeyboardInterrupt as exc:
            entry.update(status="cut off", reason=f"stopped by {signal_name(exc)}; the same command continues it "
                                                  "(a sweep cut short resumes with its finished runs kept)")
            publish()  # the page says so too
            raise
        # this command's start only: a start that failed added none, and an earlier command's is no news
        start = entry["starts"][-1] if len(entry.get("starts") or []) > before else None
        print(f"gpu-check: experiment {name}: {label}: {entry.get('status')}" + (f" ({start_words(start)})" if start else "")
              + (f": {entry['reason']}" if entry.get("reason") else ""), flush=True)
        save()
    if len(experiment.variants) > 1:
        for scenario in check.args.scenario_list:
            record["compare"][scenario] = compare(check, experiment, record, root, scenario)
    if experiment.mixed and record.get("mixed"):
        record["mixed"]["changes"] = gpu_mixed.changes(record)
    record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    publish()
    print(f"gpu-check: experiment {name}: {root}/experiment.md", flush=True)
    broken = [v for v in check.args.variant_list if record["variants"][v].get("status") == "broken"]
    broken += [f"compare {s}" for s, c in record["compare"].items() if c.get("status") == "broken"]
    for what in broken:
        print(f"gpu-check: BROKEN {what}", file=sys.stderr)
    return 1 if broken else 0
