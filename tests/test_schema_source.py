"""The Karpenter CRD files come from the pinned upstream URL (checked, cached) or a local folder.

Downloads go to an HTTP server on 127.0.0.1 serving stand-in files whose digests the test pins in
place of the real ones, so the loader is exercised without the internet and without upstream files.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stacks.versions import pins
from tests.fixtures.k8s import source as src

REPO = Path(__file__).resolve().parents[1]
FILES = {name: f"# stand-in for {name}\nkind: CustomResourceDefinition\n".encode() for name in src.SHA256}


class _Files(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    requests: list[str] = []

    def do_GET(self):  # noqa: N802
        type(self).requests.append(self.path)
        body = type(self).files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def upstream(monkeypatch):
    """A loopback 'upstream' with the stand-in files under /crds/, their digests pinned."""
    monkeypatch.setattr(src, "SHA256", {n: hashlib.sha256(b).hexdigest() for n, b in FILES.items()})
    _Files.files = {f"/crds/{n}": b for n, b in FILES.items()}
    _Files.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/crds/", _Files
    finally:
        httpd.shutdown()
        httpd.server_close()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/crds/"


def _local_dir(root: Path, files: dict[str, bytes]) -> Path:
    folder = root / f"karpenter-v{src.KARPENTER_VERSION}"
    folder.mkdir(parents=True)
    for name, body in files.items():
        (folder / name).write_bytes(body)
    return root


def test_pins_are_the_release_tag_files():
    assert src.KARPENTER_VERSION == pins().karpenter_chart
    assert src.UPSTREAM_BASE.format(version=src.KARPENTER_VERSION) == (
        "https://raw.githubusercontent.com/aws/karpenter-provider-aws/v1.14.1/pkg/apis/crds/")
    assert set(src.SHA256) == {"karpenter.k8s.aws_ec2nodeclasses.yaml", "karpenter.sh_nodeclaims.yaml",
                               "karpenter.sh_nodepools.yaml"}
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in src.SHA256.values())
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    assert tracked.stdout.strip()
    assert not {Path(f).name for f in tracked.stdout.split()} & set(src.SHA256), "never committed"


def test_first_use_downloads_into_the_cache_then_reuses_it(upstream, tmp_path):
    url, server = upstream
    env = {src.CACHE_ENV: str(tmp_path / "cache")}
    folder = src.karpenter_schema_dir(env, base_url=url)
    assert folder == tmp_path / "cache" / "schemas" / "karpenter-v1.14.1"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == FILES
    assert sorted(server.requests) == sorted(f"/crds/{n}" for n in FILES)
    server.requests.clear()
    assert src.karpenter_schema_dir(env, base_url=url) == folder
    assert server.requests == []


def test_a_damaged_cached_file_is_fetched_again(upstream, tmp_path):
    url, server = upstream
    env = {src.CACHE_ENV: str(tmp_path)}
    folder = src.karpenter_schema_dir(env, base_url=url)
    (folder / "karpenter.sh_nodepools.yaml").write_text("truncated")
    server.requests.clear()
    src.karpenter_schema_dir(env, base_url=url)
    assert server.requests == ["/crds/karpenter.sh_nodepools.yaml"]
    assert (folder / "karpenter.sh_nodepools.yaml").read_bytes() == FILES["karpenter.sh_nodepools.yaml"]


def test_a_download_with_the_wrong_checksum_fails_and_caches_nothing(upstream, tmp_path):
    url, server = upstream
    server.files["/crds/karpenter.sh_nodeclaims.yaml"] = b"kind: Tampered\n"
    with pytest.raises(src.SchemasUnavailable, match=r"karpenter.sh_nodeclaims.yaml: sha256 \w+ is not "
                                                     r"the pinned"):
        src.karpenter_schema_dir({src.CACHE_ENV: str(tmp_path)}, base_url=url)
    assert not (tmp_path / "schemas" / "karpenter-v1.14.1" / "karpenter.sh_nodeclaims.yaml").exists()


def test_the_environment_directory_wins_over_cache_and_download(upstream, tmp_path):
    url, server = upstream
    root = _local_dir(tmp_path / "local", FILES)
    env = {src.DIR_ENV: str(root), src.CACHE_ENV: str(tmp_path / "cache")}
    assert src.karpenter_schema_dir(env, base_url=url) == root / "karpenter-v1.14.1"
    assert server.requests == []
    assert not (tmp_path / "cache").exists()


def test_the_environment_directory_is_checked_too(upstream, tmp_path):
    url, _ = upstream
    root = _local_dir(tmp_path / "local", {**FILES, "karpenter.sh_nodepools.yaml": b"older release\n"})
    with pytest.raises(src.SchemasUnavailable, match="karpenter.sh_nodepools.yaml: sha256 .* not the pinned"):
        src.karpenter_schema_dir({src.DIR_ENV: str(root)}, base_url=url)
    with pytest.raises(src.SchemasUnavailable, match="has no karpenter-v1.14.1/ folder"):
        src.karpenter_schema_dir({src.DIR_ENV: str(tmp_path / "nowhere")}, base_url=url)


def test_neither_source_fails_with_the_fix(tmp_path):
    with pytest.raises(src.SchemasUnavailable) as err:
        src.karpenter_schema_dir({src.CACHE_ENV: str(tmp_path)}, base_url=_closed_port_url())
    message = str(err.value)
    assert "cannot download http://127.0.0.1:" in message
    assert "set VLLM_POC_SCHEMAS_DIR to a directory holding karpenter-v1.14.1/" in message


def test_schema_tests_fail_not_skip_without_schemas(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_POC_")}
    env.update({src.CACHE_ENV: str(tmp_path), src.URL_ENV: _closed_port_url()})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_k8s_schemas.py::test_nodepool_without_node_class_ref"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "1 error" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-3000:]
    assert "Karpenter v1.14.1 CRD schemas unavailable: cannot download" in proc.stdout
    assert "VLLM_POC_SCHEMAS_DIR" in proc.stdout
