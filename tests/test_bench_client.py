"""The library client's driver keeps its protocol off the stream vLLM logs to.

vLLM logs to stdout by default (VLLM_LOGGING_STREAM), and what it imports may print there too (a
Triton line did, on a CPU rehearsal). A fake `vllm` package whose import prints to stdout, through
print() and straight to file descriptor 1, stands in for it: the driver must still start and answer.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from bench.run import client

REPO = Path(__file__).resolve().parents[1]
PLANTED = "INFO 12-03 08:00:00 [triton.py:1] planted log line during the import"


def _fake_vllm(root: Path, main_body: str = "print('bench ran', args.x)") -> Path:
    pkg = root / "vllm"
    (pkg / "benchmarks").mkdir(parents=True)
    (pkg / "utils").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils" / "__init__.py").write_text("")
    (pkg / "benchmarks" / "__init__.py").write_text("")
    (pkg / "utils" / "argparse_utils.py").write_text("from argparse import ArgumentParser as FlexibleArgumentParser\n")
    (pkg / "benchmarks" / "serve.py").write_text(textwrap.dedent(f"""\
        import os, sys, logging
        print({PLANTED!r})
        os.write(1, b'{{"not": "the protocol"}}\\n')
        logging.basicConfig(stream=sys.stdout, level=logging.INFO)
        logging.getLogger("vllm").info("another planted line")

        def get_tokenizer(*a, **k):
            return None

        def add_cli_args(parser):
            parser.add_argument("--x", default="0")

        def main(args):
            {main_body}
            if args.x == "boom":
                raise RuntimeError("planted failure")
        """))
    return root


def _driver(fake: Path) -> client.Driver:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(REPO)])
    return client.Driver([sys.executable, "-m", "bench.run.client"], env=env, start_timeout=60)


def test_a_log_line_printed_while_vllm_imports_does_not_break_the_protocol(tmp_path):
    driver = _driver(_fake_vllm(tmp_path / "site"))
    try:
        log = tmp_path / "run1.log"
        assert driver.run(["--x", "7"], str(log), timeout=60) == (0, False)
        assert "bench ran 7" in log.read_text()
        rc, timed_out = driver.run(["--x", "boom"], str(tmp_path / "run2.log"), timeout=60)
        assert (rc, timed_out) == (1, False)
        assert "planted failure" in (tmp_path / "run2.log").read_text()
        assert driver.starts == 1  # one driver served both runs
        # nothing the import printed reached the answer channel
        assert driver.stray == []
        assert PLANTED not in log.read_text()
    finally:
        driver.stop()


def test_the_sweep_side_skips_lines_that_are_not_the_protocol():
    assert client.protocol_line('{"ready": true}\n') == {"ready": True}
    assert client.protocol_line('{"rc": 0, "error": null}') == {"rc": 0, "error": None}
    assert client.protocol_line(PLANTED) is None
    assert client.protocol_line('{"not": "the protocol"}') is None
    assert client.protocol_line("[1, 2]") is None
