"""The transformers trap: whether a vLLM and transformers pair reads a Gemma 4 config right.

transformers 5.15 and later (public reports; seen with 5.17 on the H200 box and 5.19 here) keep
Gemma 4's `head_dim` and `num_key_value_heads` per layer. vLLM 0.26 reads them from the whole config:

- without `allow_global_per_layer_attribute_access` in the config, the read raises
  AmbiguousGlobalPerLayerAttributeError and `vllm serve` stops at start-up (the real checkpoint's config
  has no such key, so it would stop the same way);
- with it, the config object no longer holds `global_head_dim` and `num_global_key_value_heads`, and vLLM
  0.26 reads them with getattr: the full-attention layers get the sliding layers' head size (256 for
  512) without a word, unless `--hf-overrides` passes them again.

vLLM 0.32.0 (the CPU build in .venv-vllm) reads the per-layer values itself and has neither problem.

The check asks vLLM itself: PROBE, run by the python that runs vLLM, builds vLLM's model config
(`EngineArgs(...).create_model_config()`, no weights and no GPU needed) twice, for a Gemma 4 config
as a checkpoint ships it (no allow flag, no overrides) and for the full-size folder with the flags it is
served with (bench/demo/full_model.py), and reports each head size or error. `finding()` turns that
into one sentence and its fix. gpu-check runs it beside its version probe and keeps it in the record;

    python -m bench.demo.transformers_trap [--python PATH]

runs it on its own (exit 0 the pair reads Gemma 4 right, 1 it does not, 2 no vLLM to ask).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.demo import full_model

TRAP_FROM = (5, 15)  # transformers' per-layer (heterogeneous) configs
CHECKED_ON = ("vLLM 0.26.0 with transformers 5.19.0 (the image's vLLM in .vllm-image): both failures; "
              "vLLM 0.32.0 with 5.19.0 (.venv-vllm): neither")
FIX_CHECKPOINT = (f"run this vLLM with transformers older than {TRAP_FROM[0]}.{TRAP_FROM[1]} (pip install "
                  f"'transformers<{TRAP_FROM[0]}.{TRAP_FROM[1]}' in the image), or a vLLM that reads per-layer "
                  "configs (0.32.0 does); for a text-model config, --hf-overrides "
                  "'{\"allow_global_per_layer_attribute_access\":true,\"global_head_dim\":512,"
                  "\"num_global_key_value_heads\":4}' also works (checked here; the multimodal checkpoint nests "
                  "these keys under text_config, not checked)")
FIX_DROPPED = "pass global_head_dim and num_global_key_value_heads with --hf-overrides (bench/demo/full_model.py's FOLDER_FLAGS)"
OK, TRAP, NOT_CHECKED = "ok", "trap", "not checked"

# Run by the vLLM python: argv[1] a folder with config.json (the full-size one), argv[2] the overrides as JSON.
PROBE = r"""
import json, os, shutil, sys, tempfile
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
info = {}
try:
    import transformers, vllm
    from vllm.engine.arg_utils import EngineArgs
    info.update(vllm=vllm.__version__, transformers=transformers.__version__)
except Exception as exc:
    print("gpu-check-trap " + json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}))
    raise SystemExit(0)

def head_size(folder, overrides):
    kw = {"hf_overrides": overrides} if overrides else {}
    try:
        config = EngineArgs(model=folder, load_format="dummy", max_model_len=8192, **kw).create_model_config()
        text = config.hf_text_config.__dict__
        return {"head_size": config.get_head_size(), "global_head_dim": text.get("global_head_dim")}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc).splitlines()[0][:300] if str(exc) else ""}

folder, overrides = sys.argv[1], json.loads(sys.argv[2])
info["served"] = head_size(folder, overrides)
info["without_overrides"] = head_size(folder, None)
shipped = tempfile.mkdtemp()
try:
    with open(os.path.join(folder, "config.json")) as fh:
        cfg = json.load(fh)
    cfg.pop("allow_global_per_layer_attribute_access", None)
    with open(os.path.join(shipped, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    info["checkpoint"] = head_size(shipped, None)
finally:
    shutil.rmtree(shipped, ignore_errors=True)
print("gpu-check-trap " + json.dumps(info))
"""


def version_tuple(text: str | None) -> tuple[int, ...]:
    """(5, 17, 0) from "5.17.0", "5.17.0.dev0" or "0.26.0+cpu"; () when there is no version."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g) for g in match.groups() if g is not None) if match else ()


def at_risk(vllm_version: str | None, transformers_version: str | None) -> bool | None:
    """From the versions alone: vLLM 0.26 with transformers >= 5.15 is the pair known to fail; None when
    either version is unknown."""
    v, t = version_tuple(vllm_version), version_tuple(transformers_version)
    if len(v) < 2 or len(t) < 2:
        return None
    return v[:2] == (0, 26) and t[:2] >= TRAP_FROM


def finding(probe: dict[str, Any] | None, expected_head_size: int = full_model.HF_OVERRIDES["global_head_dim"]) -> dict[str, Any]:
    """The probe's result in words: status ok, trap or not checked; `served` says whether the folder with
    its flags reads right, `checkpoint` whether a config as shipped would; `fix` the one thing to do."""
    if not probe or probe.get("error"):
        why = (probe or {}).get("error") or "the probe did not run"
        return {"status": NOT_CHECKED, "summary": f"could not ask vLLM how it reads a Gemma 4 config ({why})",
                "fix": None}
    pair = f"vLLM {probe.get('vllm')} with transformers {probe.get('transformers')}"
    out: dict[str, Any] = {"vllm": probe.get("vllm"), "transformers": probe.get("transformers"),
                           "at_risk_by_version": at_risk(probe.get("vllm"), probe.get("transformers"))}
    problems, fixes = [], []
    for key, words, fix in (("checkpoint", "a Gemma 4 config as the checkpoint ships it", FIX_CHECKPOINT),
                            ("served", "the full-size folder with its --hf-overrides", FIX_DROPPED)):
        got = probe.get(key) or {}
        if got.get("error"):
            out[key] = f"fails: {got['error']}"
            problems.append(f"{words} stops vLLM at start-up ({got['error']})")
            fixes.append(fix)
        elif got.get("head_size") is not None and got["head_size"] < expected_head_size:
            out[key] = f"reads the full layers' head size as {got['head_size']} (not {expected_head_size})"
            problems.append(f"{words} loses global_head_dim: the full layers get head size {got['head_size']} "
                            f"instead of {expected_head_size}, silently")
            fixes.append(FIX_DROPPED)
        else:
            out[key] = f"reads right (head size {got.get('head_size')})"
        out[f"{key}_ok"] = not (got.get("error") or (got.get("head_size") or 0) < expected_head_size)
    alone = probe.get("without_overrides") or {}
    if alone.get("head_size") is not None and alone["head_size"] < expected_head_size:
        out["without_overrides"] = (f"the folder without --hf-overrides reads head size {alone['head_size']}: "
                                    "global_head_dim is dropped")
    if problems:
        out.update(status=TRAP, summary=f"{pair}: " + "; ".join(problems), fix="; ".join(dict.fromkeys(fixes)))
    else:
        out.update(status=OK, summary=f"{pair} reads Gemma 4 configs right (head size {expected_head_size} on the "
                                      "full layers, no per-layer error)", fix=None)
    return out


def run_probe(python: str, env: dict[str, str] | None = None, timeout: float = 300) -> dict[str, Any] | None:
    """PROBE in `python` on a fresh copy of the full-size config; its JSON, or None when it printed none."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-trap-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps(full_model.config()))
        try:
            proc = subprocess.run([python, "-c", PROBE, folder, json.dumps(full_model.HF_OVERRIDES)], env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"error": f"{python} did not run: {exc}"}
    line = next((l for l in proc.stdout.splitlines() if l.startswith("gpu-check-trap ")), None)
    if line is None:
        return {"error": f"no answer from {python} (exit {proc.returncode}): {(proc.stderr or '').strip()[-300:]}"}
    return json.loads(line.split(" ", 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.demo.transformers_trap",
                                     description="Ask a vLLM install whether it reads Gemma 4 configs right with "
                                                 "its transformers (the transformers 5.15+ trap).")
    parser.add_argument("--python", default=sys.executable,
                        help="the python that runs vLLM (default: this one)")
    args = parser.parse_args(argv)
    result = finding(run_probe(args.python))
    print(f"transformers trap: {result['status']}: {result['summary']}")
    if result.get("fix"):
        print(f"fix: {result['fix']}")
    return {OK: 0, TRAP: 1}.get(result["status"], 2)


if __name__ == "__main__":
    sys.exit(main())
