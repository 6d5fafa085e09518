"""SASL on the bridge's listeners: who may send what before authenticating, and who the client is.

``sasl.mode`` (``sasl_settings.SaslSettings``) chooses how a client authenticates:

- **passthrough** (proxy mode): SaslHandshake and SaslAuthenticate are relayed on the client's own
  upstream link, so the client authenticates against the real cluster and the broker's verdict
  (error codes and messages included) is what the client sees. The bridge reads the principal from
  the mechanism's messages (``sasl_peek.PassThroughSasl``) and believes it only once the broker
  completed the exchange with error 0; a first message whose principal it cannot read is answered
  SASL_AUTHENTICATION_FAILED by the bridge (never relayed) and the connection closed (fail closed:
  the bridge would otherwise answer group APIs for an unknown principal).
- **terminated** (no upstream): the bridge is the SASL server (``scram.sasl_server``) over the
  credentials file (``credentials.load_credentials``), answering as Kafka's ``SaslServerAuthenticator``.

Either way, as Kafka's broker:

- before the exchange succeeded only ApiVersions, SaslHandshake and SaslAuthenticate are served
  (``api_table.BEFORE_AUTH``); anything else closes the connection unanswered. A SaslAuthenticate
  without an accepted SaslHandshake is answered ILLEGAL_SASL_STATE and the connection closed (once
  authenticated, it is answered ILLEGAL_SASL_STATE and the connection kept, as Kafka's KafkaApis
  answers it);
- a failed authentication is answered (SASL_AUTHENTICATION_FAILED with Kafka's message, or the
  broker's own answer when passed through) and the connection closed; terminated, the answer waits
  ``sasl.failed_authentication_delay_ms`` first (Kafka's ``connection.failed.authentication.delay.ms``),
  PLAIN's password check runs off the event loop in a bounded pool, and failures are logged as a
  summary per mechanism and address (``sasl_guard``);
- KIP-368: the session lasts ``session_lifetime_ms`` (terminated: the ``sasl.session_lifetime_ms``
  setting, Kafka's ``connections.max.reauth.ms``; passed through: what the broker announced, counted
  from when the bridge sent the final SaslAuthenticate, so it never outlives the broker's). A client
  re-authenticates with a new SaslHandshake + SaslAuthenticate on the same connection (the old session
  stays valid meanwhile, a change of principal is refused); a request other than SaslHandshake after
  the session expired closes the connection, as Kafka's broker does.

The connection's ``principal`` and ``authenticated`` are set here (``edge.connection.Connection``),
for authorization and member ownership. Nothing logged or kept holds a password, proof or token.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from connect_bridge.bridge.coordination.api_table import BEFORE_AUTH
from connect_bridge.bridge.edge.accept import RateLimited
from connect_bridge.bridge.edge.connection import ANONYMOUS, Answering, Connection
from connect_bridge.bridge.edge.connection_settings import ConnectionSettings
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.credentials import CredentialsError, CredentialStore, load_credentials
from connect_bridge.bridge.security.sasl_guard import ChecksBusy, FailedLogins, PasswordChecks
from connect_bridge.bridge.security.sasl_peek import PassThroughSasl
from connect_bridge.bridge.security.sasl_settings import SaslSettings
from connect_bridge.bridge.security.scram import (
    PlainCheck,
    SaslAuthenticationFailed,
    SaslServer,
    UnsupportedMechanism,
    sasl_server,
)
from connect_bridge.bridge.startup import StartupError
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import ApiKey
from connect_bridge.codecs.requests import (
    RequestDecodeError,
    decode_request,
    decode_response,
    request_header_fields,
)

__all__ = ["Admission", "SaslGate"]

log = logging.getLogger("connect_bridge.sasl")
_SIZE = struct.Struct(">i")
_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)


class Admission(enum.Enum):
    """What the server does with a request after the gate saw it."""

    SERVE = "serve"
    """Authenticated (or ApiVersions): serve it as usual."""
    DONE = "done"
    """A SASL request the gate answered or relayed itself."""
    CLOSE = "close"
    """Close the connection (after what is already queued for it)."""


@dataclass(slots=True, eq=False)
class _State:
    """One connection's SASL progress."""

    mechanism: str | None = None
    """The mechanism of the exchange in progress (an accepted SaslHandshake), else None."""
    server: SaslServer | None = None
    """Terminated: the exchange's server."""
    peek: PassThroughSasl | None = None
    """Pass-through: the tracker reading the relayed exchange."""
    expires_at_ms: int | None = None
    """KIP-368: when the current session ends (None: never, or not authenticated)."""
    refused: bool = False
    """An exchange failed: nothing more is served on this connection."""


Respond = Callable[[Connection, Answering | None, ApiMessage | asyncio.Future[Any]], Awaitable[None]]
"""Queues an answer in request order (``BridgeServer._respond`` without timing)."""
Forward = Callable[[Connection, bytes, int], Awaitable[Any]]
"""Relays a request on the client's upstream link (``Relay.forward``): a future of the framed answer."""


@dataclass(eq=False, repr=False)
class SaslGate:
    """The listener side of SASL for every connection of one server (see the module docstring).

    A dataclass: the gate is its settings and the server's hooks, plus two rate limiters of its
    own; ``__post_init__`` loads the credentials of a terminating gate and checks the hooks."""

    settings: SaslSettings
    clock: Callable[[], int]
    respond: Respond
    forward: Forward | None = None
    """Pass-through: how requests reach the client's upstream link."""
    credentials: CredentialStore | None = None
    metrics: Metrics | None = None
    """Counts each completed exchange (``connect_bridge_sasl_authentications_total``)."""
    max_unauthenticated_frame_bytes: int = ConnectionSettings().max_unauthenticated_frame_bytes
    """The largest SASL request before authentication: ``connections.max_unauthenticated_frame_bytes``
    (the server passes the setting; the server's read loop checks it on the size prefix already, this
    is the same bound for a request that reaches the gate some other way)."""
    _refused: RateLimited = field(default_factory=RateLimited, init=False)
    _failed: FailedLogins = field(default_factory=FailedLogins, init=False)
    _checks: PasswordChecks = field(init=False)
    """Terminated: PLAIN's password KDF, off the event loop and bounded (``sasl_guard``)."""
    _plain_check: PlainCheck = field(default_factory=PlainCheck, init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        self._checks = PasswordChecks(settings.password_check_threads, settings.max_pending_password_checks)
        if settings.mode == "terminated" and self.credentials is None:
            assert settings.credentials_file is not None  # SaslSettings checks it
            try:
                self.credentials = load_credentials(settings.credentials_file)
            except CredentialsError as exc:  # serve stops with this one line
                raise StartupError(f"sasl.credentials_file: {exc}") from None
        if self.credentials is not None:
            self._plain_check = self.credentials.plain_check()
        if settings.mode == "passthrough" and self.forward is None:
            raise ValueError("sasl.mode passthrough needs the upstream relay")

    @property
    def passthrough(self) -> bool:
        return self.settings.mode == "passthrough"

    def _state(self, conn: Connection) -> _State:
        state = conn.sasl
        if state is None:
            state = conn.sasl = _State()
        return state

    # ------------------------------------------------------------------ the gate
    async def admit(self, conn: Connection, payload: bytes) -> Admission:
        """Decide on one request (payload: the frame without its size prefix)."""
        if len(payload) < 8:
            return Admission.CLOSE
        api_key, version, correlation = request_header_fields(payload)
        state = self._state(conn)
        if state.refused:
            return Admission.CLOSE
        if api_key == _HANDSHAKE or api_key == _AUTHENTICATE:
            if not conn.authenticated and len(payload) > self.max_unauthenticated_frame_bytes:
                self._refused.log("closing %s: a %d-byte SASL request", conn.host, len(payload))
                return Admission.CLOSE
            try:
                request = decode_request(payload, framed=False)
            except RequestDecodeError as exc:
                self._refused.log("closing %s: %s", conn.host, exc)
                return Admission.CLOSE
            answering = Answering(api_key, version, correlation)
            if api_key == _HANDSHAKE:
                return await self._handshake(conn, state, request.body, answering, payload)
            return await self._authenticate(conn, state, request.body, answering, payload)
        if not conn.authenticated:
            if api_key in BEFORE_AUTH:
                return Admission.SERVE
            self._refused.log(
                "closing %s: API key %d before SASL authentication (only ApiVersions and SASL first)",
                conn.host,
                api_key,
            )
            return Admission.CLOSE
        if state.expires_at_ms is not None and self.clock() >= state.expires_at_ms:
            log.info(
                "closing %s: the SASL session of %s expired without re-authentication",
                conn.host,
                conn.principal,
            )
            return Admission.CLOSE
        return Admission.SERVE

    # ------------------------------------------------------------------ SaslHandshake
    async def _handshake(
        self,
        conn: Connection,
        state: _State,
        body: SaslHandshakeRequest,
        answering: Answering,
        payload: bytes,
    ) -> Admission:
        if state.mechanism is not None:  # a second SaslHandshake inside one exchange
            await self.respond(
                conn,
                answering,
                SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=[]),
            )
            return Admission.CLOSE
        mechanism = str(body.mechanism)
        if self.passthrough:
            upstream = await self._forward(conn, payload, answering)
            if upstream is None:
                return Admission.CLOSE

            async def inspect() -> bytes:
                frame = await upstream
                reply = self._decode(answering, frame)
                if reply.error_code == ErrorCode.NONE:
                    state.mechanism = mechanism
                    if state.peek is None:
                        state.peek = PassThroughSasl(self.settings.oauth_claim)
                    state.peek.handshake(mechanism)
                elif not conn.authenticated:
                    state.refused = True  # the broker closes its side: so does the bridge
                return bytes(frame)

            await self.respond(conn, None, asyncio.get_running_loop().create_task(inspect()))
            return Admission.DONE
        offered = list(self.settings.mechanisms)
        assert self.credentials is not None
        try:
            if mechanism not in offered:
                raise UnsupportedMechanism(mechanism)
            state.server = sasl_server(mechanism, self.credentials.lookup, self._plain_check)
        except UnsupportedMechanism:  # not offered (a listed one is always one scram.py has)
            refusal = SaslHandshakeResponse(
                error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=offered
            )
            await self.respond(conn, answering, refusal)
            return Admission.CLOSE
        state.mechanism = mechanism
        await self.respond(conn, answering, SaslHandshakeResponse(error_code=0, mechanisms=offered))
        return Admission.DONE

    # ------------------------------------------------------------------ SaslAuthenticate
    async def _authenticate(
        self,
        conn: Connection,
        state: _State,
        body: SaslAuthenticateRequest,
        answering: Answering,
        payload: bytes,
    ) -> Admission:
        if state.mechanism is None and conn.authenticated:
            # An authenticated connection not re-authenticating: Kafka's KafkaApis answers this and
            # keeps serving (only its SaslServerAuthenticator, before a login, closes).
            message = "SaslAuthenticate request received after successful authentication"
            refusal = _auth_error(ErrorCode.ILLEGAL_SASL_STATE, message)
            await self.respond(conn, answering, refusal)
            return Admission.DONE
        if state.mechanism is None:
            await self.respond(
                conn,
                answering,
                _auth_error(
                    ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate before a successful SaslHandshake"
                ),
            )
            return Admission.CLOSE
        if self.passthrough:
            return await self._relay_authenticate(conn, state, body, answering, payload)
        server = state.server
        assert server is not None
        client_bytes = bytes(body.auth_bytes or b"")
        try:
            if getattr(server, "expensive", False):  # PLAIN's KDF: off the loop, bounded
                reply = await self._checks.run(lambda: server.evaluate(client_bytes))
            else:
                reply = server.evaluate(client_bytes)
        except ChecksBusy:
            self._refused.log(
                "closing %s unanswered: %d password checks under way (sasl.max_pending_password_checks)",
                conn.host,
                self._checks.pending,
            )
            self._count(state.mechanism, "busy")
            state.refused = True
            await self._failure_delay()
            return Admission.CLOSE
        except SaslAuthenticationFailed as failure:
            self._failed.record(state.mechanism, conn.host)
            self._count(state.mechanism, "failed")
            state.refused = True
            await self._failure_delay()
            await self.respond(conn, answering, _auth_error(failure.error_code, failure.error_message))
            return Admission.CLOSE
        lifetime = 0
        if server.complete:
            principal = server.principal or ANONYMOUS
            if conn.authenticated and principal != conn.principal:
                self._count(state.mechanism, "failed")
                state.refused = True
                await self.respond(
                    conn,
                    answering,
                    _auth_error(
                        ErrorCode.SASL_AUTHENTICATION_FAILED,
                        "Cannot change principals during re-authentication",
                    ),
                )
                return Admission.CLOSE
            lifetime = self.settings.session_lifetime_ms
            self._authenticated(conn, state, principal, lifetime, mechanism=state.mechanism)
        response = SaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=reply, session_lifetime_ms=lifetime
        )
        await self.respond(conn, answering, response)
        return Admission.DONE

    async def _relay_authenticate(
        self,
        conn: Connection,
        state: _State,
        body: SaslAuthenticateRequest,
        answering: Answering,
        payload: bytes,
    ) -> Admission:
        peek = state.peek
        assert peek is not None
        peek.client_bytes(bytes(body.auth_bytes or b""))
        if peek.failure is not None:
            # The broker may well accept it, but the bridge could not say who the client is: refused
            # here, never relayed. Answered (then closed) rather than dropped, so the client fails
            # with an authentication error naming why (not a disconnect it retries forever).
            log.warning("closing %s: cannot read the SASL principal: %s", conn.host, peek.failure)
            self._count(state.mechanism, "failed")
            state.refused = True
            why = f"Authentication failed: connect-bridge cannot read the principal: {peek.failure}"
            await self.respond(conn, answering, _auth_error(ErrorCode.SASL_AUTHENTICATION_FAILED, why))
            return Admission.CLOSE
        # The broker's session starts when it completes the exchange, after the request left; the
        # bridge counts from the send, so its session never outlives the broker's: a group request
        # the bridge answers itself (never seen by the broker) is refused no later than Kafka would.
        sent_ms = self.clock()
        upstream = await self._forward(conn, payload, answering)
        if upstream is None:
            return Admission.CLOSE
        mechanism = state.mechanism

        async def inspect() -> bytes:
            frame = await upstream
            reply = self._decode(answering, frame)
            lifetime = int(getattr(reply, "session_lifetime_ms", 0) or 0) if answering.api_version >= 1 else 0
            answer = bytes(reply.auth_bytes or b"")
            session = peek.server_reply(reply.error_code, answer, lifetime, sent_ms)
            if session is not None:
                self._authenticated(
                    conn,
                    state,
                    session.principal,
                    session.lifetime.lifetime_ms,
                    session.lifetime.expires_at_ms,
                    mechanism=session.mechanism,
                )
            elif reply.error_code != ErrorCode.NONE or peek.failure is not None:
                why = str(peek.failure) if peek.failure is not None else f"broker error {reply.error_code}"
                self._failed.record(mechanism, conn.host, why)
                self._count(mechanism, "failed")
                state.refused = True  # the broker closes its side after a failure: the bridge too
                state.mechanism = None
                conn.authenticated, conn.principal = False, ANONYMOUS
            return bytes(frame)

        await self.respond(conn, None, asyncio.get_running_loop().create_task(inspect()))
        return Admission.DONE

    # ------------------------------------------------------------------ helpers
    async def _failure_delay(self) -> None:
        """Kafka's ``connection.failed.authentication.delay.ms``: a refusal is not answered at once,
        so one connection cannot guess faster than one password per delay."""
        delay_ms = self.settings.failed_authentication_delay_ms
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)

    def _authenticated(
        self,
        conn: Connection,
        state: _State,
        principal: str,
        lifetime_ms: int,
        expires_at_ms: int | None = None,
        *,
        mechanism: str | None,
    ) -> None:
        """``expires_at_ms``: when the session ends if not ``lifetime_ms`` from now (pass-through)."""
        again = conn.authenticated
        self._count(mechanism, "reauthenticated" if again else "authenticated")
        conn.principal, conn.authenticated = principal, True
        state.mechanism, state.server = None, None
        if lifetime_ms <= 0:
            state.expires_at_ms = None
        else:
            state.expires_at_ms = expires_at_ms if expires_at_ms is not None else self.clock() + lifetime_ms
        log.info(
            "%s %s as %s (%s)",
            conn.host,
            "re-authenticated" if again else "authenticated",
            principal,
            f"session {lifetime_ms} ms" if lifetime_ms > 0 else "no session expiry",
        )

    def _count(self, mechanism: str | None, result: str) -> None:
        # Bounded labels: the mechanism is one the bridge (terminated) or the broker (pass-through)
        # accepted in SaslHandshake, never an arbitrary client string.
        if self.metrics is not None:
            labels = {"mode": self.settings.mode, "mechanism": mechanism or "unknown", "result": result}
            self.metrics.sasl_authentications.labels(**labels).inc()

    async def _forward(self, conn: Connection, payload: bytes, answering: Answering) -> Any:
        assert self.forward is not None
        try:
            outcome = await self.forward(conn, payload, answering.api_key)
        except OSError as exc:
            log.warning("closing %s: upstream broker %s unreachable: %s", conn.host, conn.node_id, exc)
            return None
        return outcome if isinstance(outcome, asyncio.Future) else None

    @staticmethod
    def _decode(answering: Answering, frame: bytearray) -> ApiMessage:
        return decode_response(answering.api_key, answering.api_version, memoryview(frame)[4:], framed=False)


def _auth_error(code: int, message: str) -> SaslAuthenticateResponse:
    """A SaslAuthenticate refusal: the error, Kafka's message, and no auth bytes (as Kafka sends)."""
    return SaslAuthenticateResponse(
        error_code=int(code), error_message=message, auth_bytes=b"", session_lifetime_ms=0
    )
