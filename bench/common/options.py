"""The flags that mean the same thing in several commands, defined once: one spelling, one default and
one accepted form per meaning (the table: docs/benchmark.md#one-vocabulary).

A command calls the helper here instead of writing its own `add_argument`, so a flag added later
follows the same vocabulary. The conventions behind the names: a duration names its unit at the
end (`-ms`, `-s`, `-minutes`, `-hours`; seconds are always `-s`), a limit of the SLO is
`--slo-<metric>-p99-ms`, what concerns the baseline is `--baseline-<what>`, and every `--out`
defaults to build/<command>. A spelling that was renamed keeps working for one release as a hidden
alias that says its new name on stderr when used (`add_renamed`).

Values that cannot be right are refused while the arguments are parsed (exit 2, the flag named, and
what would be accepted): a threshold, price, timeout or replica count of 0 or below.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

from bench.common.cli import out_folder

CURRENT_REPLICAS = 12
THRESHOLD = 1.5
BASES = ("slo", "peak")
DECODE_METRICS = ("itl", "tpot")
CAPACITY_TYPES = ("on-demand", "spot")
# The SLO a sweep runs under unless told otherwise (the PoC report's), and the flags that set it
SLO_DEFAULTS = {"ttft_p99_ms": 500.0, "decode_p99_ms": 50.0, "decode_metric": "itl"}
SLO_FLAGS = {"ttft_p99_ms": "--slo-ttft-p99-ms", "decode_p99_ms": "--slo-itl-p99-ms",
             "decode_metric": "--slo-decode-metric"}
# Each renamed spelling -> the one that replaced it (kept for one release)
RENAMED = {
    "--slo-decode-p99-ms": "--slo-itl-p99-ms",
    "--verdict-basis": "--basis",
    "--health-timeout": "--health-timeout-s",
    "--server-timeout": "--health-timeout-s",
    "--run-timeout": "--run-timeout-s",
    "--timeout-s": "--run-timeout-s",
    "--poll-seconds": "--poll-s",
    "--max-poll-seconds": "--max-poll-s",
    "--log-seconds": "--log-every-s",
    "--telemetry-interval": "--telemetry-interval-s",
    "--timeout-minutes": "--wait-minutes",
    "--concurrency": "--concurrencies",  # bench streamer's list of points (one --concurrency is a count elsewhere)
}


# --- renamed flags -------------------------------------------------------------------------------


class Renamed(argparse.Action):
    """An old spelling of a flag: parses as the new one does, stores through it, and says the new name."""

    def __init__(self, option_strings: list[str], dest: str, *, new: argparse.Action, **_: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, nargs=new.nargs, const=new.const, default=argparse.SUPPRESS,
                         type=new.type, choices=new.choices, help=argparse.SUPPRESS, metavar=new.metavar)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"{parser.prog}: {option_string} is now {self.new.option_strings[0]} (the old name works until "
              "the next release)", file=sys.stderr)
        self.new(parser, namespace, values, option_string)


def add_renamed(p: argparse.ArgumentParser, flag: str, **kw: Any) -> argparse.Action:
    """`p.add_argument(flag, **kw)`, with each spelling RENAMED maps to `flag` as a hidden alias."""
    action = p.add_argument(flag, **kw)
    for old, new in RENAMED.items():
        if new == flag:
            p.add_argument(old, action=Renamed, dest=action.dest, new=action)
    return action


# --- value forms ---------------------------------------------------------------------------------


def _bounded(kind: type, *, zero_ok: bool, why: str = "") -> Callable[[str], Any]:
    noun = "a whole number" if kind is int else "a number"
    limit = "of 0 or more" if zero_ok else "above 0"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not {noun}; give {noun} {limit}") from None
        if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
            raise argparse.ArgumentTypeError(f"{text} cannot be right: give {noun} {limit}{why}")
        return value

    parse.kind = kind.__name__  # type: ignore[attr-defined]  # the value's kind, as the vocabulary test compares it
    parse.metavar = "N" if kind is int else "X"  # type: ignore[attr-defined]
    return parse


def above_zero(kind: type = float, why: str = "") -> Callable[[str], Any]:
    """argparse `type`: a finite number above 0, else a message with `why` it must be."""
    return _bounded(kind, zero_ok=False, why=why)


def at_least_zero(kind: type = float) -> Callable[[str], Any]:
    """argparse `type`: a finite number of 0 or more."""
    return _bounded(kind, zero_ok=True)


def share(text: str) -> float:
    """argparse `type`: a share of capacity from 0 up to, not including, 1 (`--headroom`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a number; give a share from 0 to below 1, e.g. 0.2") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} cannot be right: give a share from 0 to below 1, e.g. 0.2 "
                                         "(1 would keep the whole capacity free)")
    return value


share.kind = "float"  # type: ignore[attr-defined]
share.metavar = "SHARE"  # type: ignore[attr-defined]


def increasing(text: str) -> list[int]:
    """"1,2,4" -> [1, 2, 4]: whole numbers of 1 or more, each once, in increasing order. A repeat or a step
    back is a typo, so it is refused (ValueError saying the fix) rather than quietly sorted away."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{text} is not a list of whole numbers; give them comma-separated, e.g. 1,2,4,8") from None
    if not values or min(values) < 1:
        raise ValueError(f"{text or 'an empty list'} cannot be right: give whole numbers of 1 or more, e.g. 1,2,4,8")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{text} names {', '.join(map(str, repeated))} twice; give each concurrency once: "
                         f"{','.join(map(str, sorted(set(values))))}")
    if values != sorted(values):
        raise ValueError(f"{text} is not in increasing order; give {','.join(map(str, sorted(values)))}")
    return values


def concurrencies(text: str) -> list[int]:
    """argparse `type` of a list of concurrencies to measure (`increasing`)."""
    try:
        return increasing(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def concurrencies_text(text: str) -> str:
    """`concurrencies`, keeping the text as given (for commands that pass it on)."""
    concurrencies(text)
    return text


def named_concurrencies(text: str) -> str:
    """argparse `type` of NAME=C1,C2,...: a scenario's own concurrencies, by the same rule; kept as given."""
    name, sep, values = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text}: give NAME=C1,C2,..., e.g. K_korean=1,8,64")
    try:
        increasing(values)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{name}: {exc}") from None
    return text


named_concurrencies.metavar = "NAME=C1,C2"  # type: ignore[attr-defined]
concurrencies.kind = concurrencies_text.kind = "increasing whole numbers"  # type: ignore[attr-defined]
concurrencies.metavar = concurrencies_text.metavar = "C1,C2,..."  # type: ignore[attr-defined]


class Price(float):
    """An hourly price in USD, `[LABEL=]ON_DEMAND[/SPOT]`: its value is the on-demand price; `spot` is the
    Spot price when one was given, `label` the configuration it prices (None: the command's own)."""

    label: str | None
    spot: float | None

    def __new__(cls, on_demand: float, spot: float | None = None, label: str | None = None) -> Price:
        self = super().__new__(cls, on_demand)
        self.spot, self.label = spot, label
        return self

    def for_capacity(self, capacity_type: str | None) -> float:
        """The price of a node of this capacity type: the Spot one on Spot where given, else on-demand."""
        return self.spot if capacity_type == "spot" and self.spot is not None else float(self)

    def __str__(self) -> str:
        text = f"{float(self):g}" + (f"/{self.spot:g}" if self.spot is not None else "")
        return f"{self.label}={text}" if self.label else text


def price(text: str) -> Price:
    """argparse `type` of `--price-per-hour`: `[LABEL=]ON_DEMAND[/SPOT]`, USD per hour, each above 0."""
    label, sep, value = str(text).strip().rpartition("=")
    on_demand, _, spot = value.partition("/")
    form = "give [LABEL=]ON_DEMAND[/SPOT] in USD per hour, e.g. 4.13 or g7e=4.13/1.50"
    try:
        numbers = [float(on_demand), *([float(spot)] if spot else [])]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a price: {form}") from None
    if sep and not label.strip():
        raise argparse.ArgumentTypeError(f"{text}: the label before = is empty; {form}")
    if not all(n > 0 and math.isfinite(n) for n in numbers):
        raise argparse.ArgumentTypeError(f"{text} cannot be right: a price is above 0; {form}")
    return Price(numbers[0], numbers[1] if spot else None, label.strip() if sep else None)


price.kind = "price"  # type: ignore[attr-defined]


def local_folder(value: str) -> str:
    """argparse `type` of an `--out` that is written on this machine only (no s3://)."""
    if value.startswith("s3://"):
        raise argparse.ArgumentTypeError(f"{value}: this command writes local files only; give a folder here "
                                         "(and copy it to S3 afterwards if you need it there)")
    return out_folder(value)


local_folder.kind = "folder"  # type: ignore[attr-defined]


# --- the shared flags ----------------------------------------------------------------------------


def add_out(p: argparse.ArgumentParser, command: str, writes: str, *, s3: bool = True,
            required: bool = False) -> argparse.Action:
    """`--out DIR`: where a command writes; build/<command> unless `required` (an in-cluster entry point)."""
    where = ", or an s3:// prefix" if s3 else ""
    return p.add_argument("--out", type=out_folder if s3 else local_folder, metavar="DIR", required=required,
                          default=None if required else f"build/{command}",
                          help=f"folder for {writes}{where}" + ("" if required else " (default: %(default)s)"))


def add_slo(p: argparse.ArgumentParser, *, recorded_by: str | None = None, ttft_ms: float | None = None,
            itl_ms: float | None = None, decode_metric: bool = True, sized: str = "") -> None:
    """The SLO's limits. With `recorded_by` (the analyses) no default: what was recorded applies, else
    500 ms, 50 ms, itl. Else the limits a run is judged by, 500 and 50 unless given (`sized`: why not)."""
    if recorded_by:
        defaults = {k: None for k in SLO_DEFAULTS}
        said = {k: f" (default: the one {recorded_by}, else {v:g})" if k != "decode_metric" else
                f" (default: the one {recorded_by}, else {v})" for k, v in SLO_DEFAULTS.items()}
    else:
        defaults = {"ttft_p99_ms": ttft_ms or SLO_DEFAULTS["ttft_p99_ms"],
                    "decode_p99_ms": itl_ms or SLO_DEFAULTS["decode_p99_ms"],
                    "decode_metric": SLO_DEFAULTS["decode_metric"]}
        said = {k: f"{sized} (default: %(default)s)" for k in defaults}
    limit = above_zero(float, " (a limit of 0 ms is met by no request)")
    p.add_argument("--slo-ttft-p99-ms", type=limit, default=defaults["ttft_p99_ms"], metavar="MS",
                   help="the SLO's TTFT p99 limit" + said["ttft_p99_ms"])
    add_renamed(p, "--slo-itl-p99-ms", type=limit, default=defaults["decode_p99_ms"], metavar="MS",
                help=("the SLO's decode p99 limit (of --slo-decode-metric)" if decode_metric else
                      "the SLO's ITL p99 limit") + said["decode_p99_ms"])
    if decode_metric:
        p.add_argument("--slo-decode-metric", choices=DECODE_METRICS, default=defaults["decode_metric"],
                       help="itl (per chunk, the PoC's) or tpot (per token)" + said["decode_metric"])


def add_baseline(p: argparse.ArgumentParser, help: str = "sweep folder (or s3://bucket/prefix/) of the "
                                                        "hardware serving today") -> argparse.Action:
    return p.add_argument("--baseline", metavar="DIR", help=help)


def add_basis(p: argparse.ArgumentParser, used_by: str) -> argparse.Action:
    """`--basis slo|peak`: which capacity figure the verdict and the plan divide."""
    return add_renamed(p, "--basis", choices=BASES, default="slo",
                       help=f"the capacity figure of {used_by}: slo (capacity under the SLO, an interval; default) "
                            "or peak (peak output tok/s, the PoC report's method)")


def add_threshold(p: argparse.ArgumentParser) -> argparse.Action:
    return p.add_argument("--threshold", type=above_zero(float, " (the ratio per GPU the candidate must reach; "
                                                                "0 would pass anything)"),
                          default=THRESHOLD, metavar="RATIO",
                          help="the verdict's threshold on the per-GPU ratio (default: %(default)s)")


def add_current_replicas(p: argparse.ArgumentParser, serving: str = "replicas of the baseline serving "
                                                                    "today") -> argparse.Action:
    """`--current-replicas N`; None when not given, read through `current_replicas` (12)."""
    return p.add_argument("--current-replicas", type=above_zero(int), metavar="N",
                          help=f"{serving} (default: {CURRENT_REPLICAS})")


def current_replicas(args: argparse.Namespace) -> int:
    return getattr(args, "current_replicas", None) or CURRENT_REPLICAS


def add_price(p: argparse.ArgumentParser, *, repeatable: bool, prices: str,
              default: Any = None) -> argparse.Action:
    """`--price-per-hour [LABEL=]ON_DEMAND[/SPOT]`: where a node ran on Spot, its Spot price where given."""
    return p.add_argument("--price-per-hour", type=price, action="append" if repeatable else "store",
                          default=default, metavar="[LABEL=]OD[/SPOT]",
                          help=f"USD per hour of {prices}" + ("; repeatable" if repeatable else "")
                               + (" (default: %(default)s)" if default is not None else ""))


def add_capacity_type(p: argparse.ArgumentParser, flag: str = "--capacity-type", *, of: str,
                      default: Any = None) -> argparse.Action:
    return p.add_argument(flag, choices=CAPACITY_TYPES, default=default, help=f"capacity type of {of}")


def add_health_timeout(p: argparse.ArgumentParser, default: float) -> argparse.Action:
    return add_renamed(p, "--health-timeout-s", type=above_zero(float), default=default, metavar="SECONDS",
                       dest="health_timeout",
                       help="most seconds to wait for GET /health (default: %(default)s)")


def add_run_timeout(p: argparse.ArgumentParser, default: float, runs: str = "one `vllm bench serve`") -> argparse.Action:
    return add_renamed(p, "--run-timeout-s", type=above_zero(float), default=default, metavar="SECONDS",
                       dest="run_timeout",
                       help=f"most seconds {runs} may take (default: %(default)s)")


def add_metrics_url(p: argparse.ArgumentParser, read: str) -> argparse.Action:
    return p.add_argument("--metrics-url", default=None, metavar="URL",
                          help=f"the server's metrics, read {read} (default: <base-url>/metrics; none: skip)")


def metrics_url(base_url: str, given: str | None) -> str | None:
    """--metrics-url as read: the server's own /metrics unless given, None where told "none"."""
    if given is None:
        return f"{base_url.rstrip('/')}/metrics"
    return None if given.lower() in ("", "none") else given


def add_poll(p: argparse.ArgumentParser, default: float, what: str) -> argparse.Action:
    return add_renamed(p, "--poll-s", type=above_zero(float), default=default, metavar="SECONDS",
                       help=f"first wait between two looks at {what}, doubling while nothing changes "
                            "(default: %(default)s)")


def add_no_progress(p: argparse.ArgumentParser) -> argparse.Action:
    return p.add_argument("--no-progress", action="store_true",
                          help="no download progress (default: a bar on a terminal, else a line every 10 s)")
