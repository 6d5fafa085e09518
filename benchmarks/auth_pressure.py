"""An authenticated member's heartbeat while clients without credentials press on the listener.

``connect-bridge serve`` (a subprocess) with terminated SASL (PLAIN and SCRAM-SHA-512 over a
credentials file). One authenticated new-protocol member (PLAIN login, then ConnectGroupHeartbeat on
its own connection, every 20 ms) is timed twice in the same run:

1. **idle**: nothing else on the bridge (the baseline);
2. **pressed**: meanwhile ``--guessers`` threads (4) each log in with PLAIN and a wrong password in
   a loop (new connection, SaslHandshake, SaslAuthenticate, the refusal, close), and ``--idle-sockets``
   (200) TCP connections sit on the port sending nothing. The silent sockets, the guessers and the
   member use different loopback addresses, so the bridge's per-address limit (100 unauthenticated
   connections) closes none of them at accept with the default settings: all 200 sit, and every
   guess is a PBKDF2 (``guesses`` counts answered guesses, ``guesses_closed_unanswered`` the others).

Each PLAIN guess costs the bridge a PBKDF2 (run off its event loop, ``sasl_guard.py``) and is
answered after ``sasl.failed_authentication_delay_ms`` (100 ms). The target: the pressed p50 at most
2x the idle p50.

    python benchmarks/auth_pressure.py                 # 300 heartbeats per phase
    python benchmarks/auth_pressure.py --samples 1000

The last line printed is one JSON object: idle and pressed heartbeat p50/p99/max (ms), their ratio,
the target and whether it held, guesses answered (and per second) and closed unanswered, the idle
sockets still open at the end, heartbeat errors, and the bridge's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from connect_bridge.bridge.security.credentials import CredentialStore, save_credentials
from connect_bridge.codecs.requests import decode_response, encode_request
from connect_bridge.state import api as napi
from connect_bridge.wire import maps as wm

HOST = "127.0.0.1"
USER, PASSWORD = "worker", "worker-secret"
GROUP = "connect-pressure"


def read_frame(sock: socket.socket) -> bytes | None:
    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    size = exactly(4)
    return None if size is None else exactly(int.from_bytes(size, "big"))


def plain_login(sock: socket.socket, password: str) -> int:
    """SaslHandshake v1 + SaslAuthenticate v1 with PLAIN; the SaslAuthenticate error code (-1: closed)."""
    sock.sendall(encode_request(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, 1, "pressure"))
    if read_frame(sock) is None:
        return -1
    token = f"\x00{USER}\x00{password}".encode()
    sock.sendall(encode_request(SaslAuthenticateRequest[1](auth_bytes=token), 1, 2, "pressure"))
    payload = read_frame(sock)
    if payload is None:
        return -1
    return int(decode_response(36, 1, payload, framed=False).error_code)


class Member:
    """The authenticated new-protocol member whose heartbeat is timed."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert plain_login(self.sock, PASSWORD) == 0, "the member's PLAIN login failed"
        self.correlation, self.member_id, self.epoch = 100, "", 0
        join = napi.HeartbeatRequest(
            GROUP, "", 0, rebalance_timeout_ms=60_000, url="http://member:8083", owned=frozenset()
        )
        code, _ = self._send(join)
        assert code == 0, f"join failed: {code}"

    def _send(self, req: napi.HeartbeatRequest) -> tuple[int, float]:
        self.correlation += 1
        started = time.perf_counter()
        self.sock.sendall(encode_request(wm.heartbeat_to_wire(req), 0, self.correlation, "member"))
        payload = read_frame(self.sock)
        elapsed = time.perf_counter() - started
        assert payload is not None, "the member's connection was closed"
        resp = wm.heartbeat_response_from_wire(decode_response(1000, 0, payload, framed=False))
        if resp.error_code == 0:
            self.member_id, self.epoch = resp.member_id or self.member_id, max(self.epoch, resp.member_epoch)
        return resp.error_code, elapsed

    def sample(self, n: int, every_s: float) -> tuple[list[float], int]:
        """``n`` heartbeat latencies (ms) and the number of errors."""
        times, errors = [], 0
        for _ in range(n):
            code, elapsed = self._send(napi.HeartbeatRequest(GROUP, self.member_id, self.epoch))
            times.append(elapsed * 1000)
            errors += code != 0
            time.sleep(every_s)
        return times, errors


IDLE_SOURCES = ("127.0.0.2", "127.0.0.3")
"""The silent sockets come from these loopback addresses, half from each: every address of
127.0.0.0/8 is its own client address, and ``connections.max_unauthenticated_per_address`` (100)
would close at accept any beyond 100 from one address."""
GUESSER_SOURCE = "127.0.0.4"
"""The guessers' address: neither the silent sockets' nor the member's (127.0.0.1)."""


def guesser(port: int, stop: threading.Event, counts: list[int], refused: list[int], i: int) -> None:
    """Guess until ``stop``: ``counts[i]`` guesses answered (SASL_AUTHENTICATION_FAILED),
    ``refused[i]`` connections closed before an answer."""
    while not stop.is_set():
        try:
            with socket.create_connection(
                (HOST, port), timeout=10, source_address=(GUESSER_SOURCE, 0)
            ) as sock:
                answered = plain_login(sock, f"guess-{i}-{counts[i]}") != -1
        except OSError:
            answered = False
        if answered:
            counts[i] += 1
        else:
            refused[i] += 1
            time.sleep(0.01)


def still_open(socks: list[socket.socket]) -> int:
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            alive += s.recv(1) != b""
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def stats(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50_ms": round(q[49], 3), "p99_ms": round(q[98], 3), "max_ms": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300, help="heartbeats per phase (default 300)")
    parser.add_argument("--every-ms", type=float, default=20.0, help="time between heartbeats")
    parser.add_argument("--guessers", type=int, default=4, help="threads guessing PLAIN passwords")
    parser.add_argument("--idle-sockets", type=int, default=200, help="silent TCP connections")
    parser.add_argument("--target", type=float, default=2.0, help="pressed p50 / idle p50 at most")
    parser.add_argument(
        "--failed-delay-ms",
        type=int,
        default=None,
        help="sasl.failed_authentication_delay_ms (default: the bridge's, 100); 0 lets the guessers "
        "run as fast as the KDF allows",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        credentials = Path(tmp) / "credentials.yaml"
        save_credentials(CredentialStore().with_user(USER, PASSWORD), credentials)
        config = Path(tmp) / "bridge.yaml"
        config.write_text(
            "sasl:\n  mode: terminated\n  mechanisms: [PLAIN, SCRAM-SHA-512]\n"
            f"  credentials_file: {credentials}\n"
            + (
                f"  failed_authentication_delay_ms: {args.failed_delay_ms}\n"
                if args.failed_delay_ms is not None
                else ""
            )
        )
        argv = [sys.executable, "-m", "connect_bridge.cli", "serve", "--config", str(config)]
        argv += ["--listen", f"{HOST}:0", "--state-dir", str(Path(tmp) / "state"), "--metrics-listen", "off"]
        with open(Path(tmp) / "serve.log", "w") as log:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline().rsplit(":", 1)[1])
            member = Member(port)
            every = args.every_ms / 1000
            idle, idle_errors = member.sample(args.samples, every)

            socks = [
                socket.create_connection((HOST, port), source_address=(IDLE_SOURCES[i % 2], 0))
                for i in range(args.idle_sockets)
            ]
            stop, counts, refused = threading.Event(), [0] * args.guessers, [0] * args.guessers
            threads = [
                threading.Thread(target=guesser, args=(port, stop, counts, refused, i), daemon=True)
                for i in range(args.guessers)
            ]
            started = time.monotonic()
            for t in threads:
                t.start()
            time.sleep(1.0)  # the guessing under way
            pressed, pressed_errors = member.sample(args.samples, every)
            stop.set()
            for t in threads:
                t.join(10)
            seconds = time.monotonic() - started
            alive = still_open(socks)
            for s in socks:
                s.close()
            rss = 0
            with open(f"/proc/{proc.pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        rss = int(line.split()[1])
        finally:
            proc.terminate()
            proc.wait(30)
    idle_stats, pressed_stats = stats(idle), stats(pressed)
    ratio = round(pressed_stats["p50_ms"] / idle_stats["p50_ms"], 2)
    print(
        json.dumps(
            {
                "samples": args.samples,
                "idle": idle_stats,
                "pressed": pressed_stats,
                "p50_ratio": ratio,
                "target_ratio": args.target,
                "within_target": ratio <= args.target,
                "guessers": args.guessers,
                "failed_delay_ms": args.failed_delay_ms if args.failed_delay_ms is not None else 100,
                "guesses": sum(counts),
                "guesses_per_s": round(sum(counts) / seconds, 1),
                "guesses_closed_unanswered": sum(refused),
                "idle_sockets": args.idle_sockets,
                "idle_sockets_open_at_end": alive,
                "heartbeat_errors": idle_errors + pressed_errors,
                "bridge_max_rss_kb": rss,
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
