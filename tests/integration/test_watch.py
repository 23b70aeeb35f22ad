"""`embedlab watch` on a real 2 x 2 pool (hash workers, the embedded frontend), another client
sending, read as Prometheus reads it: its /metrics, parsed by prometheus_client, and Debian's
Prometheus itself evaluating the shipped alerting rules.

Every wait is for a state, with a generous deadline; the times the states took are printed
(`-s`), and are the figures of docs/verification.md ("A continuous watch").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from embedlab import Deployment, DeploymentSpec
from embedlab.watch import names
from tests.integration.test_other_traffic import another_client
from tests.prometheus_server import answers_ready, prometheus_server

MODELS = ("model-a", "model-b")
# Another client: one `hey` per model at 2 req/s (bounded), beside the watch's 16 req/s cap.
OTHER_RATE = 2
# Late enough that Prometheus has seen the alert inactive on a slow machine (the launch, the
# watch and Prometheus start in 10-20 s).
FAULT_AFTER_S = 40.0


@contextmanager
def watching(dep: Deployment, tmp_path: Path, *extra: str) -> Iterator[Watcher]:
    """`embedlab watch` attached to `dep`, in its own session, stopped by SIGTERM to its group."""
    urls = [arg for url in dep.system_urls for arg in ("--system-url", url)]
    models = ",".join(w.model for w in dep.spec.workers)
    with watch_process(
        tmp_path / "watch.log",
        *urls,
        "--worker-models",
        models,
        "--port",
        "0",
        *extra,
        frontend=dep.frontend_url,
    ) as watcher:
        yield watcher


@contextmanager
def watch_process(
    log: Path, *args: str, frontend: str, env: dict[str, str] | None = None
) -> Iterator[Watcher]:
    """`embedlab watch --frontend-url FRONTEND ARGS...`, its output in `log`, in its own session;
    yielded once it serves, stopped by SIGTERM to its group."""
    argv = [sys.executable, "-m", "embedlab", "watch", "--frontend-url", frontend, *args]
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    watcher = Watcher(proc, log)
    try:
        watcher.wait_for_port()
        yield watcher
    finally:
        watcher.stop()


class Watcher:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log, self.port = proc, log, 0
        self.started = time.monotonic()
        self.exit_code: int | None = None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_port(self, deadline_s: float = 60) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            for line in self.text().splitlines():
                if "serving http://127.0.0.1:" in line:
                    self.port = int(line.rsplit(":", 1)[1].split("/")[0])
                    return
            assert self.proc.poll() is None, (
                f"the watch exited {self.proc.returncode}:\n{self.text()[-3000:]}"
            )
            time.sleep(0.1)
        raise AssertionError(f"the watch never said where it serves:\n{self.text()[-3000:]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def samples(self) -> dict[str, list[Any]]:
        text = httpx.get(self.url, timeout=5).text
        found: dict[str, list[Any]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                found.setdefault(sample.name, []).append(sample)
        return found

    def verdicts(self) -> dict[tuple[str, str], str]:
        return {
            (s.labels[names.CHECK], s.labels[names.MODEL]): s.labels[names.STATE]
            for s in self.samples().get(names.VERDICT, [])
            if s.value == 1
        }

    def alarms(self) -> dict[tuple[str, str], float]:
        return {
            (s.labels[names.CHECK], s.labels[names.MODEL]): s.value
            for s in self.samples().get(names.ALARMS, [])
        }

    def wait_until(self, what: str, holds: Callable[[], bool], deadline_s: float) -> float:
        """Seconds since the watch started when `holds()` first held."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            assert self.proc.poll() is None, (
                f"the watch exited {self.proc.returncode}:\n{self.text()[-3000:]}"
            )
            if holds():
                return time.monotonic() - self.started
            time.sleep(0.5)
        raise AssertionError(f"{what}: not within {deadline_s:g} s; {self.verdicts()}\n{self.text()[-4000:]}")

    def usage(self) -> tuple[float, float]:
        """The watch's CPU seconds so far and its resident memory in MiB."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        rss = next(
            int(line.split()[1]) / 1024
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        return cpu, rss

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.exit_code = self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        else:
            self.exit_code = self.proc.returncode


def all_ok(watcher: Watcher) -> bool:
    found = watcher.verdicts()
    return bool(found) and set(found.values()) == {names.OK}


def test_a_correct_router_under_another_client_turns_ok_and_stays_ok_through_a_restart(
    tmp_path: Path,
) -> None:
    spec = DeploymentSpec.pool(list(MODELS), replicas=2)
    with Deployment(spec, run_dir=tmp_path / "run") as dep, another_client(dep, *MODELS, rate=OTHER_RATE):
        # The router's own counts beside the workers': with them, counted-once decides in seconds
        # (the counters alone resolve one request in ten counted twice in minutes at this rate).
        with watching(dep, tmp_path, "--router-metrics", dep.frontend_url) as watch:
            checks = (names.SAME_MODEL, names.MULTI_MODEL, names.COUNTED_ONCE)
            assert set(watch.verdicts()) == {(c, m) for c in checks for m in MODELS}
            took = watch.wait_until("every check ok", lambda: all_ok(watch), deadline_s=240)
            # A worker restarts (its counter resets): an event, never an alarm; the checks stay ok.
            dep.outages.restart_worker(1)
            watch.wait_until(
                "the restart seen", lambda: " reset: " in watch.text() or " unreadable: " in watch.text(), 60
            )
            held_until = time.monotonic() + 30
            while time.monotonic() < held_until:  # and it keeps it
                assert all_ok(watch), watch.verdicts()
                time.sleep(1)
            found = watch.samples()
            cpu, rss = watch.usage()
            elapsed = time.monotonic() - watch.started
            assert all(s.value == 0 for s in found[names.ALARMS])
            rates = {s.labels[names.MODEL]: s.value for s in found[names.REQUEST_RATE]}
            pool_rate = found[names.POOL_RATE][0].value
            assert all(0 < r <= 8 for r in rates.values()) and pool_rate > sum(rates.values()) / 2
        assert watch.exit_code == 0, watch.text()[-3000:]
        assert "stopped: after" in watch.text()
    print(
        f"\nwatch: every check ok {took:.1f} s after the watch started; held 30 s; "
        f"own rate {rates} req/s (per check), pool {pool_rate:.1f} req/s; "
        f"CPU {cpu:.1f} s over {elapsed:.0f} s ({100 * cpu / elapsed:.1f} %), RSS {rss:.0f} MiB"
    )


@contextmanager
def prometheus(tmp_path: Path, scrape_port: int) -> Iterator[str]:
    """Debian's Prometheus in a temp dir on 127.0.0.1, scraping the watch every second with the
    shipped rules; stopped by its process group, its data dir removed with tmp_path."""
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{names.RULES_FILE}']\n"
        "scrape_configs:\n"
        "  - job_name: embedlab-watch\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{scrape_port}']}}]\n"
    )
    with prometheus_server(tmp_path, config, ready=answers_ready, what="answer ready") as url:
        yield url


def alert_states(url: str) -> dict[str, str]:
    """The shipped alerting rules' states, as Prometheus's own API says them."""
    groups = httpx.get(f"{url}/api/v1/rules", params={"type": "alert"}, timeout=5).json()["data"]["groups"]
    return {rule["name"]: rule["state"] for group in groups for rule in group["rules"]}


def firing(url: str) -> list[dict[str, Any]]:
    alerts = httpx.get(f"{url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == names.ALERT and a["state"] == "firing"]


def test_a_leak_of_one_in_100_that_starts_late_is_one_alarm_and_fires_the_alert(tmp_path: Path) -> None:
    fault = f"leak:0.01@{FAULT_AFTER_S:g}s"
    spec = DeploymentSpec.pool(list(MODELS), replicas=2, frontend_args=("--fault", fault))
    launched = time.monotonic()  # the frontend, and its fault's clock, start after this
    with Deployment(spec, run_dir=tmp_path / "run") as dep, another_client(dep, *MODELS, rate=OTHER_RATE):
        with watching(dep, tmp_path) as watch, prometheus(tmp_path, watch.port) as prom:
            starts = launched + FAULT_AFTER_S
            # Before the fault: Prometheus scrapes the watch and its alert is inactive.
            watch.wait_until(
                "Prometheus sees the watch with its alert inactive",
                lambda: (
                    alert_states(prom).get(names.ALERT) == "inactive"
                    and httpx.get(f"{prom}/api/v1/query", params={"query": names.VERDICT}).json()["data"][
                        "result"
                    ]
                ),
                deadline_s=60,
            )
            assert time.monotonic() < starts or not firing(prom)
            assert not [k for k, v in watch.alarms().items() if v], "an alarm before the fault started"

            def failing() -> bool:
                return names.FAILING in {v for k, v in watch.verdicts().items() if k[0] == names.MULTI_MODEL}

            watch.wait_until(
                "a multi-model check failing", failing, deadline_s=starts + 180 - time.monotonic()
            )
            to_failing = time.monotonic() - starts
            watch.wait_until("the alert firing in Prometheus", lambda: bool(firing(prom)), deadline_s=120)
            to_firing = time.monotonic() - starts

            # The leak goes on: more refused requests, but each check's alarm counter rose by one.
            # Wait for the requests, not for a time: a leak of 1 in 100 is every 100th of a
            # model's requests, both clients', so which leaks are the watch's own is chance.
            def misplaced_now() -> float:
                return sum(s.value for s in watch.samples()[names.MISPLACED])

            def leaked_on() -> bool:
                return misplaced_now() > sum(1 for v in watch.alarms().values() if v)

            watch.wait_until("more misplaced requests than alarms", leaked_on, deadline_s=180)
            alarms = watch.alarms()
            misplaced = misplaced_now()
            assert failing(), watch.verdicts()
        assert watch.exit_code == 0, watch.text()[-3000:]
    raised = {k: v for k, v in alarms.items() if v}
    assert raised and all(v == 1 for v in raised.values()), alarms
    assert all(k[0] == names.MULTI_MODEL for k in raised), alarms
    assert misplaced > len(raised), (misplaced, alarms)
    print(
        f"\nwatch: leak:0.01 from {FAULT_AFTER_S:g} s: failing {to_failing:.1f} s after it started at the latest "
        f"(the frontend started after the launch began), the alert firing at {to_firing:.1f} s; "
        f"alarms {raised}; {misplaced:.0f} misplaced requests seen"
    )
