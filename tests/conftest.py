"""Shared test set-up. Fixtures live in tests/fixtures/, one module per concern."""

pytest_plugins = [
    "tests.fixtures.moto_server",
    "tests.fixtures.vllm_env",
    "tests.fixtures.bench_env",
    "tests.fixtures.bench_fake_metrics",
    "tests.fixtures.pulumi_stack",
    "tests.fixtures.k8s.schemas",
    "tests.fixtures.pod_identity",
    "tests.fixtures.stack_renders",
    "tests.fixtures.browser",
    "tests.fixtures.bench_pages",
    "tests.fixtures.prometheus_server",
]


def pytest_configure(config):
    _interrupts_reach_the_commands()
    config.addinivalue_line("markers", "vllm: runs a real vLLM (CPU) process, or code needing its environment (torch, Run:ai streamer), from .venv-vllm")
    config.addinivalue_line("markers", "no_server: with vllm, starts no vLLM server (a parser, a probe): may run on either worker")


def pytest_collection_modifyitems(config, items):
    # Under `-n 2` (pytest-xdist, --dist loadgroup) every test that runs a vLLM process stays on one
    # worker: two CPU vLLM servers at once would only slow each other, and their session fixtures
    # (the tiny model's server) start once. The other tests share the second core. The vLLM tests that
    # start no server (`no_server`: the image's argument parser, the transformers probe) are a group of
    # their own, which either worker may take whole (their session fixtures, the parsers, set up once).
    # A module whose tests share a costly module fixture may keep them on one worker the same way, with
    # `pytest.mark.xdist_group(name)` (tests/test_scanners.py: one checkov run, not one per worker).
    import pytest

    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.xdist_group("no_server" if item.get_closest_marker("no_server") else "vllm"))
        marker = item.get_closest_marker("xdist_group")
        if marker is not None:
            _in_group(config, item, marker.kwargs.get("name", marker.args[0] if marker.args else "default"))


def _in_group(config, item, group: str) -> None:
    """xdist's worker names a grouped test `<node id>@<group>` so that its scheduler keeps the group on
    one worker; xdist 3.8 writes that name where pytest 9 no longer reads it (`_nodeid`; pytest 9 keeps
    `_id`), so every test would be scheduled alone and each worker would start its own vLLM servers.
    The same name is set here, once, the way pytest 9 reads it. Upstream this is pytest-xdist issue
    #1386 (a fix, #1388, is not released as of xdist 3.8); tests/test_suite_grouping.py fails when the
    grouping breaks, whichever side changes."""
    if not config.getoption("loadgroup", False) or item.nodeid.endswith(f"@{group}"):
        return
    from _pytest.nodeid import coerce_node_id

    item._id = coerce_node_id(f"{item.nodeid}@{group}")


def _interrupts_reach_the_commands() -> None:
    """The interrupt tests send SIGINT to the commands they start and expect Ctrl-C's handling. A shell
    without job control starts a background job (`make test &`, a CI step sent to the background) with
    SIGINT ignored, and an ignored signal stays ignored across fork and exec: the commands would never see
    the interrupt and exit 0 (six tests failed so). A handled signal is reset to its default at exec, so
    giving this process Python's own handler lets every command the tests start receive it."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
