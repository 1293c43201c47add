"""The fleet's SLO alerts reach the receiver the stack file names.

Rendered: Alertmanager's configuration in the kube-prometheus-stack values routes every fleet alert (the
rule file's Vllm* alerts) to `vllm-poc:fleet.alerts.receiver` and the chart's own to 'null'; the URL, a
Pulumi secret, reaches Alertmanager only through a Secret it mounts. Checked by Debian's Alertmanager
tools: `amtool check-config` accepts the configuration, `amtool config routes test` sends each alert of
the rendered rule file (itself accepted by `promtool check rules`) to the receiver, and a real
Alertmanager posts a firing SLO alert to a receiver on 127.0.0.1 (and not the chart's alerts).

Debian's Alertmanager is 0.25; the chart runs 0.34. A webhook receiver reads its URL with `url_file`,
which Alertmanager has read since 0.26: for 0.25 the tests put the URL inline in its place; a Slack
receiver's `api_url_file` (0.22 and later) is checked as rendered.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from bench.demo import cpu_vllm
from components import monitoring as M
from stacks.loader import load_config
from stacks.ops.render import render_config, render_stack
from stacks.settings import ConfigError, settings_from_config
from stacks.settings import alerts as A
from tests.fixtures.prometheus_server import binaries as prometheus_binaries


def alertmanager_binaries() -> tuple[str, str]:
    found = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager"), shutil.which("amtool")
    if not all(found):
        pytest.fail("Alertmanager is missing: install Debian's package (`apt-get install -y prometheus-alertmanager`; "
                    ".ci/run does), which brings `amtool`", pytrace=False)
    return found  # type: ignore[return-value]


@pytest.fixture(scope="module")
def fleet():
    return render_stack("fleet")


def kps_values(rendered) -> dict:
    (release,) = [r for r in rendered.helm_releases() if r["name"] == "kube-prometheus-stack"]
    return release["values"]


def runnable(config: dict, url: str) -> dict:
    """The rendered configuration for Debian's Alertmanager 0.25: a webhook's url_file (0.26) as an inline url."""
    config = copy.deepcopy(config)
    for receiver in config["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            assert webhook.pop("url_file") == M.RECEIVER_URL_FILE
            webhook["url"] = url
    return config


def write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_slo_alerts_go_to_the_receiver_the_stack_names_and_its_url_stays_secret(fleet):
    values = kps_values(fleet)
    config = values["alertmanager"]["config"]
    receiver = load_config("fleet")["vllm-poc:fleet"]["alerts"]["receiver"]
    assert receiver == "ml-oncall"
    route = config["route"]
    assert route["receiver"] == "null"  # what is not the fleet's stays where the chart puts it
    assert route["routes"][0] == {"receiver": receiver, "matchers": ['alertname =~ "Vllm.+"'], "repeat_interval": "4h"}
    (target,) = [r for r in config["receivers"] if r["name"] == receiver]
    assert target["webhook_configs"] == [{"url_file": M.RECEIVER_URL_FILE, "send_resolved": True}]
    assert set(config) == {"global", "route", "receivers", "inhibit_rules", "templates"}  # the chart keeps none of its own
    # the URL: only in the Secret the operator mounts, a Pulumi secret in state
    assert values["alertmanager"]["alertmanagerSpec"]["secrets"] == [M.RECEIVER_SECRET]
    assert A.PLACEHOLDER_URL not in json.dumps(fleet.helm_releases())
    (secret,) = [o for o in fleet.k8s("Secret") if o["metadata"]["name"] == M.RECEIVER_SECRET]
    assert secret["metadata"]["namespace"] == "monitoring" and secret["stringData"] == {"url": "[secret]"}
    release = fleet.one("kubernetes:helm.sh/v3:Release", "monitoring-kube-prometheus-stack")
    assert "monitoring-alert-receiver" in {d.rsplit("::", 1)[-1] for d in release.dependencies}


def test_amtool_accepts_the_configuration_and_routes_every_fleet_alert_to_the_receiver(fleet, tmp_path):
    _, amtool = alertmanager_binaries()
    _, promtool = prometheus_binaries()
    values = kps_values(fleet)
    rules = write(tmp_path / "rules.yml", values["additionalPrometheusRulesMap"]["vllm-slo"])
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    config = write(tmp_path / "alertmanager.yml", runnable(values["alertmanager"]["config"], "https://example.org/hook"))
    check = subprocess.run([amtool, "check-config", str(config)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS" in check.stdout, check.stdout + check.stderr

    def route(labels: dict[str, str]) -> str:
        proc = subprocess.run([amtool, "config", "routes", "test", f"--config.file={config}",
                               *[f"{k}={v}" for k, v in labels.items()]], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    alerts = [r for group in values["additionalPrometheusRulesMap"]["vllm-slo"]["groups"] for r in group["rules"]
              if "alert" in r]
    assert len(alerts) >= 3
    for rule in alerts:
        labels = {"alertname": rule["alert"], **rule.get("labels", {}), "namespace": "vllm", "server": "chat"}
        assert route(labels) == "ml-oncall", rule["alert"]
    assert route({"alertname": "Watchdog", "severity": "none"}) == "null"
    assert route({"alertname": "KubePodCrashLooping", "severity": "warning", "namespace": "monitoring"}) == "null"
    # and amtool refuses a broken one: a route to a receiver that does not exist
    broken = copy.deepcopy(runnable(values["alertmanager"]["config"], "https://example.org/hook"))
    broken["route"]["routes"][0]["receiver"] = "nobody"
    proc = subprocess.run([amtool, "check-config", str(write(tmp_path / "broken.yml", broken))], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "nobody" in proc.stdout + proc.stderr


class Receiver:
    """What an on-call webhook (or Slack) would receive: every POST body, on 127.0.0.1."""

    def __init__(self):
        self.posts: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                outer.posts.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def run_alertmanager(config: dict, folder: Path) -> tuple[subprocess.Popen, str]:
    binary, _ = alertmanager_binaries()
    config = copy.deepcopy(config)
    config["route"]["group_wait"] = "1s"  # the rendered 30 s, shortened for the test
    port = cpu_vllm.free_port()
    log = (folder / "alertmanager.log").open("w")
    proc = subprocess.Popen([binary, f"--config.file={write(folder / 'alertmanager.yml', config)}",
                             f"--storage.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--cluster.listen-address="], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=2)
            return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.25)
    proc.kill()
    pytest.fail(f"Alertmanager did not start:\n{(folder / 'alertmanager.log').read_text()[-3000:]}")


def fire(url: str, *names: str) -> None:
    alerts = [{"labels": {"alertname": name, "severity": "page", "namespace": "vllm", "server": "chat", "slo": "TTFT"},
               "annotations": {"summary": f"{name} on chat"}} for name in names]
    req = urllib.request.Request(f"{url}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10)


def wait_for(receiver: Receiver, budget_s: float = 30) -> list[dict]:
    deadline = time.monotonic() + budget_s
    while not receiver.posts and time.monotonic() < deadline:
        time.sleep(0.25)
    time.sleep(1.5)  # anything else that was coming
    return receiver.posts


@pytest.mark.parametrize("kind", ["webhook", "slack"])
def test_a_firing_slo_alert_reaches_the_receiver_and_the_charts_alerts_do_not(kind, tmp_path):
    config = load_config("fleet")
    if kind == "slack":
        config["vllm-poc:fleet"] = {**config["vllm-poc:fleet"], "alerts": {
            "receiver": "ml-oncall", "kind": "slack", "channel": "#vllm-oncall"}}
        rendered = render_config(config, stack="fleet")
    else:
        rendered = render_stack("fleet")
    receiver = Receiver()
    am_config = kps_values(rendered)["alertmanager"]["config"]
    if kind == "slack":
        (slack,) = [r for r in am_config["receivers"] if r["name"] == "ml-oncall"][0]["slack_configs"]
        assert slack["api_url_file"] == M.RECEIVER_URL_FILE and slack["channel"] == "#vllm-oncall"
        url_file = tmp_path / "url"
        url_file.write_text(receiver.url)  # the mounted Secret's file
        slack["api_url_file"] = str(url_file)
    else:
        am_config = runnable(am_config, receiver.url)
    proc, url = run_alertmanager(am_config, tmp_path)
    try:
        fire(url, "VllmTtftP99AboveSlo", "KubePodCrashLooping", "Watchdog")
        posts = wait_for(receiver)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        receiver.httpd.shutdown()
    assert len(posts) == 1, posts
    if kind == "slack":
        (attachment,) = posts[0]["attachments"]
        assert attachment["title"] == "FIRING: VllmTtftP99AboveSlo on chat" and posts[0]["channel"] == "#vllm-oncall"
    else:
        assert posts[0]["receiver"] == "ml-oncall" and posts[0]["status"] == "firing"
        assert [a["labels"]["alertname"] for a in posts[0]["alerts"]] == ["VllmTtftP99AboveSlo"]


def test_a_fleet_without_a_receiver_or_its_url_is_refused_naming_the_key():
    base = load_config("fleet")

    def problems(config: dict) -> list[str]:
        with pytest.raises(ConfigError) as err:
            settings_from_config(config, stack="fleet")
        return err.value.problems

    no_alerts = {**base, "vllm-poc:fleet": {k: v for k, v in base["vllm-poc:fleet"].items() if k != "alerts"}}
    no_alerts.pop("vllm-poc:alertWebhookUrl")
    (problem,) = problems(no_alerts)
    assert problem.startswith("vllm-poc:fleet.alerts: the fleet's SLO alerts need a receiver")
    no_url = {k: v for k, v in base.items() if k != "vllm-poc:alertWebhookUrl"}
    (problem,) = problems(no_url)
    assert problem.startswith("vllm-poc:alertWebhookUrl: fleet.alerts sends to ml-oncall, which needs its URL")
    assert "pulumi config set --secret vllm-poc:alertWebhookUrl" in problem
    assert "not an http(s) URL" in problems({**base, "vllm-poc:alertWebhookUrl": "hooks.example.org/x"})[0]
    slack_channel = {**base, "vllm-poc:fleet": {**base["vllm-poc:fleet"], "alerts": {
        "receiver": "ml-oncall", "channel": "#x"}}}
    assert any("channel applies to kind slack only" in p for p in problems(slack_channel))
    # offline, an encrypted value reads as set
    assert settings_from_config({**base, "vllm-poc:alertWebhookUrl": "[secret]"}, stack="fleet").alert_webhook_url


def test_the_url_is_refused_in_plain_text_and_the_placeholder_in_a_real_account(tmp_path):
    from stacks.account_checks import check_placeholders
    from stacks.api_path import DOCUMENTATION_ACCOUNT
    from stacks.loader import load_settings
    from stacks.ops.preflight.offline import Context, alert_receiver

    text = (Path(__file__).resolve().parents[1] / "Pulumi.fleet.yaml").read_text()
    assert f"vllm-poc:alertWebhookUrl: {A.PLACEHOLDER_URL}" in text
    (tmp_path / "Pulumi.yaml").write_text("name: vllm-poc\nruntime: python\n")
    (tmp_path / "Pulumi.fleet.yaml").write_text(text.replace(A.PLACEHOLDER_URL, "https://hooks.example.org/T0/B0/x"))
    with pytest.raises(ConfigError) as err:
        load_settings("fleet", tmp_path)
    assert any(p.startswith("vllm-poc:alertWebhookUrl: written in plain text") for p in err.value.problems)
    # the shipped placeholder: renders offline, refused by a real `up` and by preflight
    settings = load_settings("fleet")
    check_placeholders(settings, DOCUMENTATION_ACCOUNT)
    with pytest.raises(ConfigError) as err:
        check_placeholders(settings, "111122223333")
    assert any("alertWebhookUrl: https://alerts.invalid/vllm-poc-fleet is the shipped placeholder" in p
               for p in err.value.problems)
    (finding,) = alert_receiver(settings, Context())
    assert finding.level == "blocker" and "pulumi config set --secret vllm-poc:alertWebhookUrl" in finding.fix
