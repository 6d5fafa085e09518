"""A long structure-aware fuzzing campaign against ``connect-bridge serve`` (issue 11).

The generator, mutations and oracle are those of ``tests/test_fuzz_structured.py`` (requests built
from the JSON specs at every version, broken one field at a time; every frame that parses must be
answered in order with a response its spec can read, the first that does not must close the
connection). Here they run against a ``connect-bridge serve`` subprocess from several worker
processes at once, while a well-behaved ConnectGroupHeartbeat member of another group heartbeats
every 100 ms on its own connection. Its latency is measured twice in the same run: alone first
(the baseline), then during the campaign.

    python benchmarks/fuzz.py                  # 1,000,000 frames
    python benchmarks/fuzz.py --frames 100000  # a shorter run
    python benchmarks/fuzz.py --tls-sasl       # on a TLS listener with terminated SASL (PLAIN)

``--tls-sasl``: every connection (the fuzzer's and the heartbeating member's) is TLS and logs in
with PLAIN first, so the campaign reaches the group APIs of an authenticated client and runs through
the TLS and SASL layers; SaslHandshake and SaslAuthenticate are left out of the scripts (after the
login they would start a re-authentication, which the oracle does not model). Each script is a new
connection (a TLS handshake and a login for 1.8 frames on average), so the fuzz user has
SCRAM-SHA-256 credentials only: its PLAIN check is PBKDF2-SHA-256, about 1.3 ms of CPU instead of
3 ms with SHA-512.

The last line printed is one JSON object: frames, answers, closes, parked (JoinGroup/SyncGroup left
waiting for a rebalance, as Kafka's classic protocol does), violations (frames whose answer or
close broke the invariant; the first few are printed), crashes (the server process died),
max_rss_kb (the server's VmHWM) and its RSS before/after, heartbeat p50/p99/max during the campaign
and the baseline p50/p99 without it, heartbeat errors, seconds and frames per second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_fuzz_structured import (
    POPULATED_GROUP,
    STEADY_GROUP,
    Campaign,
    SteadyMember,
    Tally,
    run_script,
)

HOST = "127.0.0.1"
MAX_FRAME = 1 << 20
CONFIG = f"""\
max_frame_bytes: {MAX_FRAME}
coordinator:
  classic_initial_rebalance_delay_ms: 0
"""
"""Defaults but for a 1 MiB frame limit (the oracle's) and no initial classic rebalance delay (each
new classic group would otherwise hold its first JoinGroup 3 s: parked, not fuzzed)."""


def start_bridge(state_dir: str, config: str, log: Any) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "connect_bridge.cli",
            "serve",
            "--config",
            config,
            "--listen",
            f"{HOST}:0",
            "--state-dir",
            state_dir,
            "--metrics-listen",
            "off",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.rsplit(":", 1)[1])


def join_when_loaded(port: int, group: str, timeout: float = 30.0) -> SteadyMember:
    """Join once the bridge has replayed its records (it answers COORDINATOR_LOAD_IN_PROGRESS before)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return SteadyMember.join(port, group)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def server_problems(log_path: str) -> list[str]:
    """Log lines of the bridge that no fuzzed frame should cause: a request it decoded but could not
    handle, errors, tracebacks (closes of frames that do not parse are warnings, and expected)."""
    markers = ("cannot handle", " ERROR ", " CRITICAL ", "Traceback", "closing a client connection")
    with open(log_path, errors="replace") as f:
        return [line.rstrip() for line in f if any(m in line for m in markers)]


def proc_status_kb(pid: int, key: str) -> int:
    """``VmHWM``/``VmRSS`` of ``pid`` in kB (0 when the process is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Heartbeats(threading.Thread):
    """The well-behaved member: one heartbeat every 100 ms, latency recorded per phase."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.member = join_when_loaded(port, STEADY_GROUP)
        self.phase = "idle"
        self.samples: dict[str, list[float]] = {"baseline": [], "campaign": []}
        self.errors = 0
        self.failure: str | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stopping.is_set():
            try:
                code, seconds = self.member.heartbeat()
            except Exception as exc:  # the member's connection died: the bridge did
                self.failure = f"{type(exc).__name__}: {exc}"
                return
            if self.phase in self.samples:
                self.samples[self.phase].append(seconds * 1000)
            if code != 0:
                self.errors += 1
            next_at += 0.1
            self.stopping.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)
        self.member.sock.close()


SASL_APIS = (17, 36)
"""SaslHandshake and SaslAuthenticate: not fuzzed after a ``--tls-sasl`` login (see the docstring)."""
FUZZ_USER, FUZZ_PASSWORD = "fuzz", "fuzz-secret"


class AuthenticatedCampaign(Campaign):
    """The campaign without the SASL APIs (the connection is already authenticated)."""

    def request(
        self, api_key: int | None = None, version: int | None = None, shape: str | None = None
    ) -> Any:
        while True:
            req = super().request(api_key, version, shape)
            if req.api_key not in SASL_APIS:
                return req


def secure_connections() -> None:
    """From now on (and in forked workers) ``socket.create_connection`` returns a TLS socket that
    logged in with PLAIN: what ``run_script`` and ``SteadyMember`` open."""
    import socket
    import ssl

    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    from connect_bridge.codecs.requests import decode_response, encode_request
    from test_fuzz_structured import _read_frame

    plain = socket.create_connection
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE

    def connect(address: Any, timeout: Any = None, *args: Any, **kwargs: Any) -> Any:
        sock = context.wrap_socket(plain(address, timeout, *args, **kwargs), server_hostname=address[0])
        sock.sendall(encode_request(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, 1, "fuzz-login"))
        _read_frame(sock)
        token = f"\x00{FUZZ_USER}\x00{FUZZ_PASSWORD}".encode()
        sock.sendall(encode_request(SaslAuthenticateRequest[1](auth_bytes=token), 1, 2, "fuzz-login"))
        answer = _read_frame(sock)
        if answer is None or decode_response(36, 1, answer, framed=False).error_code != 0:
            sock.close()
            raise ConnectionRefusedError("the PLAIN login of the fuzzer failed")
        return sock

    socket.create_connection = connect


def secure_config(directory: Path) -> str:
    """The ``tls`` and ``sasl`` sections of ``--tls-sasl`` (certificates and credentials made here)."""
    from certs import make_tls_material
    from connect_bridge.bridge.security.credentials import CredentialStore, save_credentials

    directory.mkdir()
    tls = make_tls_material(directory)
    credentials = directory / "credentials.yaml"
    # SCRAM-SHA-256 credentials only: the PLAIN check is then PBKDF2-SHA-256 (about 1 ms of CPU)
    # rather than SHA-512 (about 6 ms). Every script opens a new connection and logs in, so with
    # SHA-512 the login was most of the bridge's CPU per frame; what is fuzzed is the same.
    store = CredentialStore().with_user(FUZZ_USER, FUZZ_PASSWORD, mechanisms=["SCRAM-SHA-256"])
    save_credentials(store, credentials)
    return (
        f"tls:\n  certfile: {tls.server_cert}\n  keyfile: {tls.server_key}\n"
        f"sasl:\n  mode: terminated\n  mechanisms: [PLAIN]\n  credentials_file: {credentials}\n"
        "  password_check_threads: 2\n"
    )


def worker(
    port: int,
    seed: int,
    frames: int,
    out: multiprocessing.Queue,  # type: ignore[type-arg]
    secure: bool = False,
    sent: Any = None,
) -> None:
    """Run scripts until ``frames`` were sent; ``sent`` (a shared counter) follows the progress."""
    campaign = (AuthenticatedCampaign if secure else Campaign)(random.Random(seed), MAX_FRAME)
    total = Tally()
    violations: list[str] = []
    crashed = False
    while total.frames < frames:
        script, notes = campaign.script()
        try:
            tally = run_script(HOST, port, script, MAX_FRAME, pools=campaign.pools)
        except ConnectionRefusedError:
            crashed = True
            break
        except OSError as exc:  # e.g. a reset while sending: judged like a close
            tally = Tally(scripts=1, frames=len(notes))
            tally.failures.append(f"{type(exc).__name__}: {exc}; frames {notes}; script {script[:400].hex()}")
        if tally.failures:
            violations.extend(f"{f}\n    frames: {notes}" for f in tally.failures)
            tally.failures = []
        total.add(tally)
        if sent is not None:
            with sent.get_lock():
                sent.value += tally.frames
    out.put(
        {
            "frames": total.frames,
            "answers": total.answers,
            "closes": total.closes,
            "parked": total.parked,
            "scripts": total.scripts,
            "violations": len(violations),
            "examples": violations[:3],
            "crashed": crashed,
            "outcomes": dict(total.outcomes),
        }
    )


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return round(values[0], 3) if values else 0.0
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to send (default 1,000,000)")
    parser.add_argument("--workers", type=int, default=2, help="fuzzing processes (default 2)")
    parser.add_argument("--baseline-seconds", type=float, default=20.0, help="heartbeats alone first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tls-sasl", action="store_true", help="a TLS listener with terminated SASL (PLAIN)")
    parser.add_argument(
        "--progress-seconds", type=float, default=60.0, help="a progress line this often (0: none)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "bridge.yaml")
        Path(config).write_text(CONFIG + (secure_config(Path(tmp) / "secure") if args.tls_sasl else ""))
        if args.tls_sasl:
            secure_connections()
        log_path = os.path.join(tmp, "serve.log")
        log = open(log_path, "w")  # closed below, after the bridge
        bridge, port = start_bridge(os.path.join(tmp, "state"), config, log)
        crashes = 0
        try:
            populated = join_when_loaded(port, POPULATED_GROUP)  # a group the fuzzer does name
            populated.sock.close()
            beats = Heartbeats(port)
            rss_start = proc_status_kb(bridge.pid, "VmRSS")
            beats.phase = "baseline"
            beats.start()
            time.sleep(args.baseline_seconds)
            beats.phase = "idle"
            alone = beats.samples["baseline"]
            print(
                f"baseline: {len(alone)} heartbeats, p99 {pct(alone, 99)} ms, server RSS {rss_start:,} kB",
                flush=True,
            )

            context = multiprocessing.get_context("fork")
            results: multiprocessing.Queue = context.Queue()  # type: ignore[type-arg]
            share = -(-args.frames // args.workers)
            started = time.perf_counter()
            beats.phase = "campaign"
            sent = context.Value("q", 0)
            procs = [
                context.Process(
                    target=worker, args=(port, args.seed * 1000 + i, share, results, args.tls_sasl, sent)
                )
                for i in range(args.workers)
            ]
            for p in procs:
                p.start()
            rss_samples = []
            next_report = time.perf_counter() + args.progress_seconds
            while any(p.is_alive() for p in procs):
                time.sleep(1.0)
                rss_samples.append(proc_status_kb(bridge.pid, "VmRSS"))
                if bridge.poll() is not None:
                    crashes = 1
                if args.progress_seconds > 0 and time.perf_counter() >= next_report:
                    next_report += args.progress_seconds
                    elapsed = time.perf_counter() - started
                    done = sent.value
                    print(
                        f"progress: {done:,} of {args.frames:,} frames in {elapsed:.0f} s "
                        f"({done / elapsed:,.0f}/s), server RSS {rss_samples[-1]:,} kB",
                        flush=True,
                    )
            reports = [results.get(timeout=30) for _ in procs]
            for p in procs:
                p.join()
            seconds = time.perf_counter() - started
            beats.phase = "idle"
            time.sleep(0.3)
            if bridge.poll() is not None or any(r["crashed"] for r in reports) or beats.failure:
                crashes = 1
            max_rss = proc_status_kb(bridge.pid, "VmHWM")
            rss_end = proc_status_kb(bridge.pid, "VmRSS")
            beats.stop()
        finally:
            if bridge.poll() is None:
                bridge.send_signal(signal.SIGTERM)
                bridge.wait(20)
            exit_code = bridge.returncode
            log.close()
            problems = server_problems(log_path)

    total = {
        k: sum(r[k] for r in reports)
        for k in ("frames", "answers", "closes", "parked", "scripts", "violations")
    }
    examples = [e for r in reports for e in r["examples"]][:5]
    outcomes: Counter[str] = Counter()
    for r in reports:
        outcomes.update(r["outcomes"])
    campaign_lat = beats.samples["campaign"]
    baseline_lat = beats.samples["baseline"]
    result = {
        "frames": total["frames"],
        "answers": total["answers"],
        "answers_without_error": sum(n for key, n in outcomes.items() if key.endswith(":0")),
        "closes": total["closes"],
        "parked": total["parked"],
        "connections": total["scripts"],
        "violations": total["violations"],
        "server_log_problems": len(problems),
        "crashes": crashes,
        "server_exit_code": exit_code,
        "max_rss_kb": max_rss,
        "rss_start_kb": rss_start,
        "rss_end_kb": rss_end,
        "rss_max_sampled_kb": max(rss_samples, default=0),
        "heartbeat_p50_ms": pct(campaign_lat, 50),
        "heartbeat_p99_ms": pct(campaign_lat, 99),
        "heartbeat_max_ms": round(max(campaign_lat, default=0.0), 3),
        "heartbeats": len(campaign_lat),
        "heartbeat_errors": beats.errors,
        "baseline_heartbeat_p50_ms": pct(baseline_lat, 50),
        "baseline_heartbeat_p99_ms": pct(baseline_lat, 99),
        "baseline_heartbeats": len(baseline_lat),
        "seconds": round(seconds, 1),
        "frames_per_s": round(total["frames"] / seconds),
        "workers": args.workers,
        "tls_sasl": args.tls_sasl,
    }
    print("answers by API and error code: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())))
    for line in problems[:5]:
        print(f"server log: {line[:1000]}")
    for example in examples:
        print(f"violation: {example[:2000]}")
    if beats.failure:
        print(f"the well-behaved member failed: {beats.failure}")
    print(
        f"{result['frames']:,} frames in {result['seconds']} s ({result['frames_per_s']:,}/s): "
        f"{result['answers']:,} answers, {result['closes']:,} closes, {result['parked']:,} parked, "
        f"{result['violations']} violations, {crashes} crashes"
    )
    print(
        f"server RSS {rss_start:,} kB at start, {rss_end:,} kB at the end, peak (VmHWM) {max_rss:,} kB; "
        f"heartbeat p99 {result['heartbeat_p99_ms']} ms during the campaign "
        f"vs {result['baseline_heartbeat_p99_ms']} ms alone"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
