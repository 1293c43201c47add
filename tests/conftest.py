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
]


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: runs a real vLLM (CPU) process, or code needing its environment (torch, Run:ai streamer), from .venv-vllm")
