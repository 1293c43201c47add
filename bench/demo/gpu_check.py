"""The checks of `python -m bench gpu-check` (the command, its flags and its help: bench/demo/gpu_cli.py):
one Check holds the record, starts and stops the servers (one "pod" each) and runs each step in order,
a step's failure recorded under its name while the rest still run; --experiment hands the probed
runtime to bench/demo/gpu_experiment.py.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from bench.common import interrupts as I
from bench.common import leftovers
from bench.demo import cpu_vllm, full_model, gpu_experiment, gpu_full, gpu_page, gpu_settings, gpu_sweep
from bench.demo import gpu_steps as S
from bench.demo.gpu_runtime import Runtime, UsageError
from bench.demo.command import local_startup_record
from bench.startup import memory as startup_memory
from bench.startup import phases as startup_phases
from bench.startup import sleepwake

KIND = "vllm-poc/gpu-check"
VERSION = 1
SERVER_NOTE = "server.pid.json"  # under --out: the running server's process group, for the next command
PROBES = "probes.json"  # under --out: the version probe's and the trap's answers, and what they depend on
STEPS = ("model", "cold_start", "timeline", "sleep_wake", "compile_cache", "sweep", "speculative")
OK, BROKEN, NOT_AVAILABLE, SKIPPED = "ok", "broken", "not available", "skipped"


def _say(text: str) -> None:
    print(text, flush=True)


class Check:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = Path(args.out)
        self.work = self.out / "work"
        self.logs = self.out / "logs"
        self.runtime: Runtime | None = None
        self.server: S.Server | None = None
        self.s3 = S.S3(args.s3_uri)
        self.model_dir = gpu_full.model_dir(self.work, args)
        self.full = gpu_full.full(args)
        self.cache_root = (self.work / "cache").resolve()
        self.port = 0  # one port for every start, as a pod's (set when the run starts)
        self.server_name: str | None = None  # the pod whose server is up
        self.previous: dict[str, Any] | None = None  # the record --resume continues
        self.record: dict[str, Any] = {
            "kind": KIND, "version": VERSION, "date": time.strftime("%Y-%m-%d"),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
            "settings": {"env": gpu_settings.server_env("<cache root>"), "serve_flags": [],
                         "push_excludes": list(gpu_settings.PUSH_EXCLUDES), "not_set": gpu_settings.NOT_SET},
            "checks": {}, "broken": [],
        }

    # -- bookkeeping -------------------------------------------------------------------------
    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu-check.json").write_text(json.dumps(self.record, indent=2, sort_keys=False) + "\n")

    def step(self, name: str, fn: Callable[[], dict[str, Any]], needs: tuple[str, ...] = (),
             skip: str | None = None) -> dict[str, Any]:
        checks = self.record["checks"]
        if name not in self.args.step_list:
            earlier = (self.previous or {}).get("checks", {}).get(name)
            if earlier and earlier.get("status") != SKIPPED:  # --resume: the earlier run's result stands
                checks[name] = {**earlier, "carried_from": self.previous.get("started_at")}
                if earlier.get("status") == BROKEN:
                    self.record["broken"].append(name)
            else:
                checks[name] = {"status": SKIPPED, "reason": "not in --steps"}
            return checks[name]
        if skip:
            checks[name] = {"status": SKIPPED, "reason": skip}
            _say(f"gpu-check: {name}: skipped ({skip})")
            return checks[name]
        missing = [n for n in needs if checks.get(n, {}).get("status") != OK]
        if missing:
            checks[name] = {"status": SKIPPED, "reason": f"needs {', '.join(missing)}, which did not pass"}
            _say(f"gpu-check: {name}: skipped ({checks[name]['reason']})")
            self.save()
            return checks[name]
        _say(f"gpu-check: {name} ...")
        t0 = time.monotonic()
        try:
            entry = {"status": OK, **fn()}
        except S.NotAvailable as exc:
            entry = {"status": NOT_AVAILABLE, "reason": f"not available on this device: {exc}", **exc.figures}
        except S.Broken as exc:
            entry = {"status": BROKEN, "reason": str(exc), **exc.figures}
        except Exception as exc:  # noqa: BLE001 - one step's crash names the step and the rest still runs
            entry = {"status": BROKEN, "reason": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()[-3000:]}
        entry["step_s"] = round(time.monotonic() - t0, 1)
        checks[name] = entry
        if entry["status"] == BROKEN:
            self.record["broken"].append(name)
        _say(f"gpu-check: {name}: {entry['status']}" + (f" ({entry['reason'].splitlines()[0][:300]})"
                                                        if entry.get("reason") else ""))
        self.save()
        return entry

    # -- serving -----------------------------------------------------------------------------
    def flags(self, **override: Any) -> list[str]:
        if self.full:
            return gpu_full.flags(self.args, **override)
        if self.runtime.gpu:
            device = ["--dtype", "bfloat16", "--max-model-len", "2048",
                      "--gpu-memory-utilization", f"{self.args.gpu_memory_utilization:g}"]
            stack = list(gpu_settings.SERVE_FLAGS)
        else:  # the CPU build: float32, eager (no compile to wait for), no sleep mode
            device = list(cpu_vllm.SERVE_FLAGS)
            stack = [f for f in gpu_settings.SERVE_FLAGS if f != "--enable-sleep-mode"]
        return [*device, *stack]

    def pod(self, name: str) -> S.Pod:
        """A fresh pod at the same paths as every other (a pod's HOME and TMPDIR do not move between pods);
        the previous pod's folder is kept under pods/ for inspection."""
        folder = self.work / "pod"
        if folder.exists():
            previous = json.loads((folder / "pod.json").read_text()).get("name", "previous") \
                if (folder / "pod.json").is_file() else "previous"
            (self.work / "pods").mkdir(exist_ok=True)
            shutil.rmtree(self.work / "pods" / previous, ignore_errors=True)
            shutil.move(str(folder), str(self.work / "pods" / previous))
        folder.mkdir(parents=True)
        (folder / "pod.json").write_text(json.dumps({"name": name}))
        return S.Pod(name, folder, self.cache_root)

    def start(self, pod: S.Pod, extra: tuple[str, ...] = (), flags: list[str] | None = None) -> S.Server:
        flags = self.flags() if flags is None else flags
        env = gpu_full.environment(pod.env(self.runtime.env), gpu_full.tp_of(flags))
        if not self.runtime.gpu:  # vLLM's CPU build, ours or one --python names: a KV cache of its own size, else
            # it asks for 92 % of the machine's memory free at every start
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", cpu_vllm.KV_CACHE_GIB)
        if said := leftovers.stop_leftover(self.out / SERVER_NOTE):
            print(f"gpu-check: {said}", flush=True)
        if self.runtime.gpu:
            S.ensure_gpu_free(gpu_full.tp_of(flags))
        cmd = S.serve_command(self.runtime.python, self.model_dir, self.port, [*flags, *extra],
                                self.served_name)
        server = S.start(cmd, env, self.logs / f"server-{pod.name}.log", noted=self.out / SERVER_NOTE)
        try:
            S.wait_healthy(server, self.args.health_timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def start_figures(self, server: S.Server, name: str) -> dict[str, Any]:
        parsed = startup_phases.parse_file(server.log)
        keys = ("engine_init_s", "engine_init_compilation_s", "compile_total_s", "dynamo_s", "compile_graphs_s",
                "compile_cache", "compile_cache_load_s", "cuda_graph_s", "weight_load_s", "model_load_s",
                "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "vllm_version", "time_to_ready_s")
        record = local_startup_record(server.log, server.launched, server.launched + server.healthy_s,
                                      f"gpu-check {name}")
        record["instance_type"] = self.args.instance_type
        return {"healthy_s": server.healthy_s, **{k: parsed.get(k) for k in keys},
                "memory_gib": startup_memory.from_phases(parsed),  # vLLM's memory profile, as the start-up table reads it
                **gpu_full.log_figures(S.tail(server.log, 10**7)),
                "milestones_s": dict(server.milestones), "startup_record": record, "log": str(server.log)}

    @property
    def served_name(self) -> str:
        """The name the servers answer to, which the sweeps' reports show as the model: the tiny model's, or
        the full-size architecture's with its random weights."""
        return S.FULL_SERVED_NAME if self.full else S.SERVED_NAME

    @property
    def tensor_parallel_size(self) -> int:
        return getattr(self.args, "tensor_parallel_size", 1)

    # -- the steps ---------------------------------------------------------------------------
    def build_model(self) -> dict[str, Any]:
        if self.full:
            return self.build_full_model()
        size = "gpu" if self.runtime.gpu else "cpu"
        summary_file = self.model_dir / "tiny_model.json"
        if summary_file.is_file():
            summary = json.loads(summary_file.read_text())
            if summary.get("size") == size and summary.get("vocab_words") == self.args.vocab_words:
                return {"built": False, **summary}
            shutil.rmtree(self.model_dir)
        proc = subprocess.run([self.runtime.python, str(cpu_vllm.TINY_MODEL_SCRIPT), str(self.model_dir),
                               "--vocab-words", str(self.args.vocab_words), "--size", size],
                              env=self.runtime.env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise S.Broken(f"building the tiny model failed:\n{proc.stderr[-2000:]}")
        return {"built": True, **json.loads(summary_file.read_text())}

    def build_full_model(self) -> dict[str, Any]:
        trap = self.record.get("transformers_trap") or {}
        if trap.get("served_ok") is False:
            raise S.Broken(f"this vLLM would not read the full-size folder right: {trap.get('summary')}; fix: "
                           f"{trap.get('fix')}")
        summary_file = self.model_dir / full_model.SUMMARY_FILE
        if summary_file.is_file() and json.loads(summary_file.read_text()) == full_model.summary(
                full_model.config(), self.args.vocab_words):  # the same folder: kept
            summary = json.loads(summary_file.read_text())
            self.record["model"] = gpu_full.model_record(summary, self.args)
            return {"built": False, **summary, "serve_line": full_model.serve_line(self.model_dir)}
        proc = subprocess.run([self.runtime.python, "-m", "bench.demo.full_model", str(self.model_dir),
                               "--vocab-words", str(self.args.vocab_words)],
                              env=self.runtime.env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise S.Broken(f"building the full-size folder failed:\n{proc.stderr[-2000:]}")
        summary = json.loads((self.model_dir / full_model.SUMMARY_FILE).read_text())
        self.record["model"] = gpu_full.model_record(summary, self.args)
        return {"built": True, **summary, "serve_line": full_model.serve_line(self.model_dir)}

    def cold_start(self) -> dict[str, Any]:
        shutil.rmtree(self.cache_root, ignore_errors=True)
        self.cache_root.mkdir(parents=True)
        self.server = self.start(self.pod("cold"))
        self.server_name = "cold"
        self.record["settings"]["serve_flags"] = self.server.cmd[self.server.cmd.index("serve") + 1:]
        figures = self.start_figures(self.server, "cold")
        if self.runtime.gpu and figures["compile_cache"] == "hit":
            raise S.Broken("the cold start loaded a compiled graph from the cache: the cache root was not empty")
        if self.full and (problems := gpu_full.start_problems(figures, self.args)):
            raise S.Broken("; ".join(problems), figures)
        return figures

    def timeline(self) -> dict[str, Any]:
        cold = self.record["checks"]["cold_start"]
        parsed = startup_phases.parse_file(Path(cold["log"]))
        if not startup_phases.is_vllm_log(parsed) or parsed.get("engine_init_s") is None:
            raise S.Broken(f"the server's log ({cold['log']}) did not parse: no engine init line; vLLM's log format "
                           "changed, or the log is not vLLM's (bench/startup/phases.py reads it)")
        rows = sorted(cold["milestones_s"].items(), key=lambda kv: kv[1])
        return {"phases": {k: v for k, v in parsed.items() if v is not None},
                "milestones": [{"at_s": at, "event": key} for key, at in rows],
                "table": startup_phases.format_table(parsed)}

    def sleep_wake(self) -> dict[str, Any]:
        if not self.runtime.gpu:
            raise S.NotAvailable("vLLM's CPU build has no sleep mode")
        server = self.serving("sleep")
        base = server.url
        before_text = S.greedy_text(base, model=server.name)
        gpus = self.tensor_parallel_size
        used_awake = S.gpu_memory_mib(gpus)
        t0 = time.perf_counter()
        S.post(f"{base}/sleep?level=1")
        sleep_s = time.perf_counter() - t0
        used_asleep = S.gpu_memory_mib(gpus)
        asleep = sleepwake._sleeping(base)
        t0 = time.perf_counter()
        S.post(f"{base}/wake_up")
        wake_s = time.perf_counter() - t0
        used_woken = S.gpu_memory_mib(gpus)
        awake = sleepwake._sleeping(base) is False
        after_text = S.greedy_text(base, model=server.name)
        out = {"level": 1, "server": self.server_name, "sleep_s": round(sleep_s, 3), "wake_s": round(wake_s, 3),
               "memory_used_mib": {"before_start": self.record.get("idle_memory_mib"), "awake": used_awake,
                                   "asleep": used_asleep, "woken": used_woken},
               "is_sleeping_confirmed": asleep is True and awake, "same_greedy_answer": before_text == after_text}
        problems = []
        if not out["is_sleeping_confirmed"]:
            problems.append("/is_sleeping did not confirm sleep then wake")
        if used_awake and used_asleep is not None:
            held = used_awake - (self.record.get("idle_memory_mib") or 0)
            out["freed_mib"] = round(used_awake - used_asleep)
            out["restored_mib"] = round((used_woken or 0) - used_asleep)
            if out["freed_mib"] < 0.5 * held:
                problems.append(f"sleep freed {out['freed_mib']} MiB of the {held:.0f} MiB the server held")
            if out["restored_mib"] < 0.9 * out["freed_mib"]:
                problems.append(f"wake-up took back {out['restored_mib']} MiB of the {out['freed_mib']} MiB freed")
        if not out["same_greedy_answer"]:
            problems.append("the greedy answer after wake-up differs from the one before sleep")
        if problems:
            raise S.Broken("; ".join(problems))
        return out

    def serving(self, name: str) -> S.Server:
        """The server this command started, else a pod of its own on the cache root: a step that needs one runs
        alone under --resume (the cold start's server went with the command that started it), or after a
        restored pod that did not start."""
        if self.server is None:
            self.server = self.start(self.pod(name))
            self.server_name = name
        return self.server

    def sweep(self) -> dict[str, Any]:
        self.serving("sweep")
        return gpu_sweep.sweep(self)

    def vllm_wrapper(self) -> Path:
        """A `vllm` command run by the vLLM python (an install without console scripts on PATH has none)."""
        path = self.work / "bin" / "vllm"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!{self.runtime.python}\nfrom vllm.entrypoints.cli.main import main\nmain()\n")
        path.chmod(0o755)
        return path

    def compile_cache(self) -> dict[str, Any]:
        self.stop_server()
        before = S.cache_files(self.cache_root)
        key = f"gpu-check-{int(time.time())}"
        self.s3.open(key)
        out: dict[str, Any] = {"transport": self.s3.transport, "where": self.s3.note, "uri": self.s3.uri,
                               "cache_files": len(before), "cache_bytes": sum(s for s, _ in before.values())}
        push = self.s3.push(self.cache_root, self.runtime.env)
        out["push"] = {k: push.get(k) for k in ("outcome", "files", "bytes", "seconds", "reason", "rc", "output_tail")}
        if push.get("outcome") != "pushed":
            raise S.Broken(f"the push did not store the cache ({push.get('outcome')}: {push.get('reason')})", out)
        # the new pod: the cold pod's cache root is gone; only what the pull restores is there
        shutil.move(str(self.cache_root), str(self.work / "cache-cold"))
        self.cache_root.mkdir()
        pull = self.s3.pull(self.cache_root, self.runtime.env)
        out["pull"] = {k: pull.get(k) for k in ("outcome", "files", "bytes", "seconds", "reason", "rc", "output_tail")}
        if pull.get("outcome") != "restored":
            raise S.Broken(f"the pull did not restore the cache ({pull.get('outcome')}: {pull.get('reason')})", out)
        restored = S.cache_files(self.cache_root)
        restored_at = time.time()
        self.server = self.start(self.pod("restored"))
        self.server_name = "restored"
        warm = self.start_figures(self.server, "restored")
        after = S.cache_files(self.cache_root)
        out["restored_start"] = warm
        out["files_added"] = sorted(set(after) - set(restored))[:50]
        out["files_added_count"] = len(set(after) - set(restored))
        out["files_rewritten_count"] = sum(1 for p in restored if p in after and after[p][1] > restored_at)
        cold = self.record["checks"].get("cold_start", {})
        out["healthy_s_saved"] = (round(cold["healthy_s"] - warm["healthy_s"], 1)
                                  if cold.get("healthy_s") and warm.get("healthy_s") else None)
        out["compilation_skipped"] = warm.get("compile_cache") == "hit"
        if not self.runtime.gpu and warm.get("compile_total_s") is None and cold.get("compile_total_s") is None:
            out["compilation_skipped"] = None
            raise S.NotAvailable("the CPU build serves in eager mode here: nothing was compiled to skip (the push, "
                                 "the pull and the second start ran; their figures are in this record)", out)
        if not out["compilation_skipped"]:
            raise S.Broken(f"the start from the restored cache compiled again (compile cache: "
                              f"{warm.get('compile_cache') or 'no cache line in the log'})", out)
        return out

    def speculative(self) -> dict[str, Any]:
        self.stop_server()
        if not self.runtime.gpu:
            raise S.NotAvailable("vLLM's CPU build runs no draft model here")
        draft = self.work / "draft"
        if not draft.is_dir():
            shutil.copytree(self.model_dir, draft)
        config = {"model": str(draft), "num_speculative_tokens": self.args.spec_tokens}
        extra = ("--speculative-config", json.dumps(config), "--enforce-eager")
        try:
            self.server = self.start(self.pod("speculative"), extra)
        except S.Broken as exc:
            why = S.refused(self.logs / "server-speculative.log")
            if why:
                raise S.NotAvailable(f"this vLLM refused the draft model: {why}") from None
            raise exc
        base = self.server.url
        before = S.get_text(f"{base}/metrics")
        done, seconds = S.completions(base, n=32, concurrency=4, max_tokens=64)
        after = S.get_text(f"{base}/metrics")
        acc = S.acceptance(before, after)
        out = {"draft": "a copy of the tiny model (same weights and tokenizer)", "config": config,
               "enforce_eager": True, "requests": done, "seconds": round(seconds, 2),
               "healthy_s": self.server.healthy_s, "acceptance": acc, "log": str(self.server.log)}
        self.stop_server()
        if acc is None:
            raise S.Broken("/metrics has no spec-decode counters (vllm:spec_decode_num_drafts ...)", out)
        if not acc.get("drafts"):
            raise S.Broken("the server drafted nothing during 32 requests", out)
        return out

    # -- the run -----------------------------------------------------------------------------
    def resume(self) -> None:
        """--resume (and --experiment): continue the record in --out, keeping its compile cache."""
        path = self.out / "gpu-check.json"
        if not path.is_file() and getattr(self.args, "experiment", None):
            # an experiment keeps --out with or without --resume; one whose first command was cut off
            # before gpu-check.json was written (2026-12-06, after its cold start) continues as it is
            _say(f"gpu-check: --resume: {path} is not there yet (an earlier --experiment command stopped before "
                 "writing it); the experiment continues from what --out holds, as it does without --resume")
            return
        if not path.is_file():
            raise UsageError(f"--resume: {path} does not exist; run gpu-check without --resume first (its cold "
                             "start fills the compile cache the next runs start from)")
        previous = json.loads(path.read_text())
        mine, theirs = self.record["model_choice"], previous.get("model_choice") or {"shape": gpu_full.TINY}
        if mine != theirs:
            raise UsageError(f"--resume: {path} was made with {gpu_full.describe(theirs)}, this run asks for "
                             f"{gpu_full.describe(mine)}; give another --out, or the same model flags")
        self.previous = previous

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.record["model_choice"] = gpu_full.choice(self.args)
        experiment = getattr(self.args, "experiment", None)
        if getattr(self.args, "resume", False):
            self.resume()
        if self.previous is None and not experiment:
            for stale in ("pod", "pods", "cache", "cache-cold", "cache.pushed", "draft", "bin"):
                shutil.rmtree(self.work / stale, ignore_errors=True)
        self.runtime = Runtime(self.args, self.out)
        if self.runtime.cpu_build:  # the project's CPU build serves no full-size model: no probe needs asking
            gpu_full.check_device(self.args, False, 0, UsageError)
        info, trap, probed_at = self.runtime.probes(self.out / PROBES)
        gpu_full.check_device(self.args, self.runtime.gpu, self.runtime.gpus, UsageError)
        self.port = cpu_vllm.free_port()
        self.record["device"] = {"gpu": self.runtime.gpu, "name": info.get("nvidia_smi_name") or info.get("device_name")
                                 or ("CPU (vLLM's CPU build)" if self.runtime.cpu_build else "CPU"),
                                 "memory_gib": info.get("device_memory_gib"), "driver": info.get("driver"),
                                 "cuda_runtime": info.get("cuda_runtime"), "instance_type": self.args.instance_type}
        self.record["device"]["gpus_seen"] = self.runtime.gpus
        self.record["versions"] = {k: info.get(k) for k in ("vllm", "torch", "transformers", "triton", "python")}
        self.record["transformers_trap"] = trap
        self.record["probed_at"] = probed_at  # None: probed by this command
        self.record["idle_memory_mib"] = S.gpu_memory_mib(self.tensor_parallel_size)
        _say(f"gpu-check: {self.record['device']['name']}, vLLM {info.get('vllm')}, torch {info.get('torch')}, "
             f"transformers {info.get('transformers')}; model {gpu_full.describe(self.record['model_choice'])}")
        _say(f"gpu-check: transformers trap: {trap['status']}: {trap['summary']}")
        if probed_at:
            _say(f"gpu-check: versions and trap as probed at {probed_at} by an earlier command (same python, machine, "
                 f"GPUs and packages; {PROBES} in --out)")
        if experiment:
            return gpu_experiment.run(self, experiment)
        _say(f"gpu-check: writing {self.out}/gpu-check.json")
        try:
            self.step("model", self.build_model)
            self.record.setdefault("model", gpu_full.model_record(self.record["checks"]["model"], self.args))
            self.step("cold_start", self.cold_start, ("model",))
            self.step("timeline", self.timeline, ("cold_start",))
            self.step("sleep_wake", self.sleep_wake, ("cold_start",))
            self.step("compile_cache", self.compile_cache, ("cold_start",))
            self.step("sweep", self.sweep, ("cold_start",))
            self.step("speculative", self.speculative, ("model",),
                      skip=gpu_full.SPECULATIVE_SKIPPED if self.full else None)
        except KeyboardInterrupt as exc:
            self.record["stopped"] = {"by": I.signal_name(exc),
                                      "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                      "checks_done": [n for n, c in self.record["checks"].items()
                                                      if c.get("status") != SKIPPED]}
            self.save()
            raise
        finally:
            self.stop_server()
            self.s3.close()
        self.record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.save()
        gpu_page.write(self.record, self.out)
        broken = self.record["broken"]
        if broken:
            for name in broken:
                print(f"gpu-check: BROKEN {name}: {self.record['checks'][name]['reason'].splitlines()[0][:400]}",
                      file=sys.stderr)
            return 1
        _say(f"gpu-check: every check passed or was not available on this device; {self.out}/gpu-check.md")
        return 0
