"""`python -m bench gpu-check`: the serving configuration checked on one GPU in about ten minutes,
before the multi-hour PoC.

For anyone with one GPU and vLLM (the serving image, or a pip install): it builds a tiny random Llama
here (bench/demo/tiny_model.py at its GPU size, 32,000 words by default), serves it with the stack's
server settings that do not depend on the 31B model (bench/demo/gpu_settings.py: the compile cache
under VLLM_CACHE_ROOT with Triton's inside it, sleep mode, prefix caching, the offline Hub), and
checks, in order:

  model          the model builds (the tiny model, or the full-size folder with --model-shape)
  cold_start     a start on an empty compile cache: seconds to /health, engine init, torch.compile
  timeline       the start-up phases parsed from the server's log (`bench startup`'s parser) and the
                 milestones seen while it started, in seconds since launch
  sleep_wake     POST /sleep and /wake_up: seconds, GPU memory freed and restored, the same greedy
                 answer before and after
  compile_cache  the cache pushed and pulled by the servers' own steps (`python -m weights compile-cache
                 push|pull`) through S3 (--s3-uri, else a moto server on 127.0.0.1, else a local copy,
                 labelled so), then a new "pod" (fresh HOME and TMPDIR, only the cache root restored):
                 seconds to /health, engine init and compile seconds, and whether compilation was skipped
  sweep          `python -m bench sweep` (S1_chat) at a few concurrencies on the restored pod's server,
                 cross-checked against vLLM's own `vllm bench serve` at the same points, each side with a
                 measured window of at least --window-s seconds (sized from a short burst at each point);
                 the signed gaps' range and the shortest windows are recorded (bench/demo/gpu_sweep.py)
  speculative    a draft model (a copy of the tiny one: nearly every draft accepted), from /metrics

Full size (--model-shape gemma-4-31b): the same checks on the Gemma-4-31B architecture with random
weights (bench/demo/full_model.py: config and tokenizer only, served with --load-format dummy, online
FP8 weights and an fp8 KV cache by default, --tensor-parallel-size N on N GPUs with NCCL_NVLS_ENABLE=0).
The record adds the model (shape, parameters, precision, KV cache dtype), the KV cache tokens and the
attention backend vLLM chose; speculative decoding is skipped (a random draft measures nothing).
Random weights do not measure accuracy, speculative acceptance, the vision tower, or anything the
weights' values decide. On an H200 a cold start takes about 4 minutes and a warm one about 2: split
the check over commands with --steps and --resume (the same --out keeps the record and the compile
cache), and run the PoC's experiments with --experiment NAME (gpu_experiment.py: a server per variant,
no sleep mode as in the stack, `bench sweep` on each, `bench compare`). docs/full-size.md has commands.

The transformers trap (bench/demo/transformers_trap.py) is checked with the same python before any
step: the record says whether this vLLM and transformers read a Gemma 4 config right.

It writes gpu-check.json (the record), gpu-check.md, gpu-check.html and the servers' logs to --out. A
step that cannot run here (vLLM's CPU build has no sleep mode; a draft the build refuses) is reported
"not available on this device", which is not a failure.

Exit codes: 0 every check passed or was not available; 1 a check is broken (each named on stderr and in
the record); 2 bad input (an --out that is a file, a bad flag value, no vLLM to run).
"""

from __future__ import annotations

import argparse
import sys

from bench.common import interrupts as I
from bench.common import options as O
from bench.common.cli import Help
from bench.demo import experiments, full_model, gpu_experiment, gpu_full
from bench.demo.gpu_check import STEPS, Check
from bench.demo.gpu_runtime import UsageError
from bench.run import grid


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, e.g. 2") from None


def check_args(args: argparse.Namespace) -> None:
    args.concurrencies_given = getattr(args, "concurrencies", None) is not None
    gpu_full.check_args(args, UsageError)
    gpu_experiment.check_args(args, UsageError)
    try:
        args.concurrency_list = grid.parse_concurrencies(args.concurrencies)
    except grid.UsageError as exc:
        raise UsageError(str(exc)) from None
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown or not steps:
        raise UsageError(f"--steps {args.steps!r}: choose from {','.join(STEPS)}")
    args.step_list = steps
    if args.vocab_words < 32000 and not args.allow_small_vocab:
        raise UsageError(f"--vocab-words {args.vocab_words}: give 32000 or more (with fewer words vLLM's random "
                         "prompts share prefixes and the prefix cache inflates the sweep), or pass "
                         "--allow-small-vocab for a quick CPU rehearsal")
    for flag, value in (("--window-s", args.window_s), ("--health-timeout-s", args.health_timeout),
                        ("--agree-pct", args.agree_pct), ("--length-scale", args.length_scale)):
        if not value > 0:
            raise UsageError(f"{flag} {value:g}: give a positive number")
    if args.s3_uri and not args.s3_uri.startswith("s3://"):
        raise UsageError(f"--s3-uri {args.s3_uri!r}: give s3://BUCKET/PREFIX")


def run(args: argparse.Namespace) -> int:
    try:
        check_args(args)
        check = Check(args)
        with I.stop_on_signals():
            return check.run()
    except UsageError as exc:
        print(f"bench gpu-check: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # every server this command started is stopped by now (the steps' and variants' own clean-up): the next
        # command finds the GPU free
        if not getattr(args, "experiment", None):
            again = "run it again with --resume and --steps naming the checks still to run"
        elif getattr(args, "again", False):  # the same command would set this command's runs aside too
            again = ("run the same command without --again: the experiment keeps its finished sweeps and runs, "
                     "and a sweep cut short resumes")
        else:
            again = ("run the same command again: the experiment keeps its finished sweeps and runs, and a sweep "
                     "cut short resumes")
        print(f"bench gpu-check: stopped by {I.signal_name(exc)}; its vLLM server is stopped, and {args.out} keeps "
              f"what was measured: {again}", file=sys.stderr)
        return I.exit_code(exc)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("gpu-check", help="check the serving configuration on one GPU in about ten minutes",
                              description=__doc__, formatter_class=Help)
    O.add_out(p, "gpu-check", "gpu-check.json, gpu-check.md, gpu-check.html and the servers' logs", s3=False)
    p.add_argument("--python", default=None,
                   help="the python that runs vLLM (default: this one if it imports vllm, else the CPU build in "
                        "VLLM_POC_VLLM_VENV or .venv-vllm)")
    p.add_argument("--steps", default=",".join(STEPS), help=f"checks to run, comma-separated (default: all: "
                                                            f"{','.join(STEPS)})")
    p.add_argument("--model-shape", choices=gpu_full.SHAPES, default=gpu_full.TINY,
                   help=f"the model served: {gpu_full.TINY} (a 123 M Llama, the default) or {full_model.SHAPE} (the "
                        "Gemma-4-31B architecture with RANDOM weights, on a GPU: what they do not measure is above)")
    p.add_argument("--precision", default="fp8", help="full size: the weights, fp8 (vLLM's online FP8, the default) "
                                                      "or bf16")
    p.add_argument("--kv-cache-dtype", default="fp8", help="full size: fp8 (the default, as the PoC) or auto")
    p.add_argument("--tensor-parallel-size", type=_whole_number, default=1,
                   help="full size: GPUs per server (default 1); more than 1 sets NCCL_NVLS_ENABLE=0")
    p.add_argument("--resume", action="store_true",
                   help="continue the record in --out: checks not in --steps keep their results and the "
                        "compile cache stays")
    p.add_argument("--experiment", choices=sorted(experiments.EXPERIMENTS), default=None,
                   help="instead of the checks, run one of the PoC's experiments on the model: one server per "
                        "variant on --out's compile cache, `bench sweep` on each, then `bench compare` "
                        "(docs/full-size.md)")
    p.add_argument("--scenarios", default=None,
                   help="with --experiment: its scenarios to sweep now, comma-separated (default: all of them)")
    p.add_argument("--variants", default=None,
                   help="with --experiment: the variants to run now, comma-separated (default: all)")
    p.add_argument("--again", action="store_true",
                   help="with --experiment: measure finished variants anew (a repeat from a fresh server; the "
                        "earlier sweeps stay beside as SCENARIO.earlier-N)")
    p.add_argument("--budget-minutes", type=float, default=None,
                   help="with --experiment: GPU minutes each sweep may spend, grid and capacity search (default: the "
                        "sweep's, 60)")
    p.add_argument("--target-width", type=float, default=None,
                   help="with --experiment: the capacity search's target, hi / lo of its ends (default: the sweep's, "
                        "1.22)")
    p.add_argument("--vocab-words", type=int, default=32000, help="the model's tokenizer words (default 32000)")
    p.add_argument("--allow-small-vocab", action="store_true", help="allow --vocab-words under 32000 (CPU rehearsals)")
    p.add_argument("--concurrencies", default=None, type=O.concurrencies_text,
                   help="sweep points, increasing (default 1,4,16,64; full size 1,16,64; an experiment's own unless "
                        "given)")
    p.add_argument("--window-s", type=float, default=15.0,
                   help="least measured window of each sweep run and each `vllm bench serve` cross-check run, "
                        "seconds (default 15)")
    p.add_argument("--agree-pct", type=float, default=25.0,
                   help="largest gap between the bench's and vllm bench serve's output tok/s (default 25)")
    p.add_argument("--length-scale", type=O.above_zero(float), default=1.0,
                   help="scale S1_chat's 256/128 tokens (default 1; CPU rehearsals 0.125)")
    p.add_argument("--s3-uri", default=None,
                   help="push and pull the compile cache through this bucket prefix (default: a moto server on "
                        "127.0.0.1 when moto is installed, else a local copy, labelled so)")
    p.add_argument("--spec-tokens", type=int, default=3, help="draft tokens per step (default 3)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM's (default 0.9)")
    O.add_renamed(p, "--health-timeout-s", type=O.above_zero(float), default=None, metavar="SECONDS",
                  dest="health_timeout", help="most seconds to wait for GET /health (default 600; full size 900)")
    p.add_argument("--sweep-timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    p.add_argument("--instance-type", default="local-gpu",
                   help="a name for this machine in the record and the start-up records (default local-gpu)")
    p.set_defaults(func=run)
    return p
