"""Shared test set-up. Fixtures live in tests/fixtures/, one module per concern."""

pytest_plugins = [
    "tests.fixtures.moto_server",
    "tests.fixtures.vllm_env",
    "tests.fixtures.bench_env",
    "tests.fixtures.bench_fake_metrics",
    "tests.fixtures.pulumi_stack",
    "tests.fixtures.k8s_schemas",
    "tests.fixtures.pod_identity",
    "tests.fixtures.stack_renders",
    "tests.fixtures.browser",
    "tests.fixtures.bench_pages",
    "tests.fixtures.prometheus_server",
]


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: runs a real vLLM (CPU) process, or code needing its environment (torch, Run:ai streamer), from .venv-vllm")


def pytest_collection_modifyitems(config, items):
    # Under `-n 2` (pytest-xdist, --dist loadgroup) every test that runs a vLLM process stays on one
    # worker: two CPU vLLM servers at once would only slow each other, and their session fixtures
    # (the tiny model's server) start once. The other tests share the second core.
    import pytest

    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.xdist_group("vllm"))
