package io.connectbridge.connect.member;

import io.connectbridge.connect.member.MemberLogic.Reaction;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;
import org.apache.kafka.common.utils.Time;
import org.slf4j.Logger;

import java.io.IOException;
import java.util.function.Consumer;
import java.util.function.LongSupplier;

/**
 * The member's network thread: heartbeats at the interval the coordinator returns, at once when the
 * logic asks (a revocation acknowledged, a rejoin), and fences the member when its session must have
 * expired at the coordinator, reachable or not. Every {@link Reaction} goes to {@code sink}, which
 * hands the work changes to the herder thread. All access to the {@link MemberLogic} is under its
 * monitor.
 */
public final class HeartbeatLoop implements Runnable {
    private final MemberLogic logic;
    private final ConnectGroupClient client;
    private final Time time;
    private final Consumer<Reaction> sink;
    private final LongSupplier configOffset;
    private final int requestTimeoutMs;
    private final int retryBackoffMs;
    private final Logger log;
    private long nextAt;
    private long lastSentAt = Long.MIN_VALUE / 2;
    private volatile boolean closing;
    private Thread thread;

    public HeartbeatLoop(MemberLogic logic, ConnectGroupClient client, Time time, Consumer<Reaction> sink,
                         LongSupplier configOffset, int requestTimeoutMs, int retryBackoffMs, Logger log) {
        this.logic = logic;
        this.client = client;
        this.time = time;
        this.sink = sink;
        this.configOffset = configOffset;
        this.requestTimeoutMs = requestTimeoutMs;
        this.retryBackoffMs = retryBackoffMs;
        this.log = log;
    }

    public synchronized void start(String name) {
        if (thread == null) {
            thread = new Thread(this, name);
            thread.setDaemon(true);
            thread.start();
        }
    }

    /** Heartbeat at once (not sooner than the retry backoff after the previous one). */
    public void heartbeatNow() {
        synchronized (logic) {
            nextAt = Math.min(nextAt, lastSentAt + retryBackoffMs);
            logic.notifyAll();
        }
    }

    /** Stops the thread; with {@code leave}, sends the leave heartbeat (epoch -1, or -2 when static). */
    public void shutdown(boolean leave) {
        closing = true;
        client.wakeup();
        synchronized (logic) {
            logic.notifyAll();
        }
        Thread t;
        synchronized (this) {
            t = thread;
        }
        if (t != null && t != Thread.currentThread()) {
            try {
                t.join(requestTimeoutMs + 1000L);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (leave) {
            sendLeave("the worker is stopping");
        }
    }

    /** Sends the leave heartbeat; the coordinator hands our work out once it has it. */
    public void sendLeave(String reason) {
        HeartbeatRequest leave;
        synchronized (logic) {
            if (logic.memberEpoch() <= 0 && logic.lastAssignment() == null) {
                return; // never joined
            }
            leave = logic.leaveRequest();
        }
        try {
            HeartbeatResponse resp = client.heartbeat(leave, requestTimeoutMs);
            log.info("Left the Connect group with member epoch {} ({}): answer error {}", leave.memberEpoch(), reason,
                resp.errorCode());
        } catch (IOException e) {
            log.info("Leave heartbeat failed ({}); the coordinator will expire the session", e.getMessage());
        }
    }

    @Override
    public void run() {
        try {
            while (!closing) {
                HeartbeatRequest request;
                long now = time.milliseconds();
                synchronized (logic) {
                    Reaction expired = logic.expireSession(now);
                    if (expired != null) {
                        log.warn("No answered heartbeat for session.timeout.ms ({} ms): giving up all work and "
                            + "rejoining", logic.settings().sessionTimeoutMs());
                        sink.accept(expired);
                        continue;
                    }
                    if (logic.resetPending() || logic.fatal() != null) {
                        waitOn(1000);
                        continue;
                    }
                    Long expiry = logic.sessionExpiryMs();
                    long wakeAt = expiry == null ? nextAt : Math.min(nextAt, expiry);
                    if (now < wakeAt) {
                        waitOn(wakeAt - now);
                        continue;
                    }
                    request = logic.heartbeatRequest(now, configOffset.getAsLong());
                    lastSentAt = now;
                }
                long timeout = requestTimeoutMs;
                Long expiry;
                synchronized (logic) {
                    expiry = logic.sessionExpiryMs();
                }
                if (expiry != null) {
                    timeout = Math.max(1, Math.min(timeout, expiry - now));
                }
                Reaction reaction;
                HeartbeatResponse response = null;
                try {
                    response = client.heartbeat(request, timeout);
                } catch (IOException e) {
                    if (closing) {
                        return;
                    }
                    log.debug("Heartbeat failed: {}", e.getMessage());
                }
                synchronized (logic) {
                    reaction = response == null ? logic.onTransportFailure() : logic.onResponse(response);
                    if (reaction.stale) {
                        continue;
                    }
                    nextAt = time.milliseconds() + (reaction.heartbeatNow ? 0 : Math.max(reaction.intervalMs, 1));
                }
                if (reaction.rediscover) {
                    client.coordinatorLost("heartbeat answered error " + reaction.error);
                }
                if (reaction.error != 0 && reaction.error != MemberLogic.COMPUTE_ASSIGNMENT) {
                    log.info("Heartbeat answered error {}", reaction.error);
                }
                sink.accept(reaction);
            }
        } catch (RuntimeException e) {
            log.error("Connect group heartbeat thread failed", e);
            synchronized (logic) {
                sink.accept(logic.startReset(failure(e)));
            }
        }
    }

    private static Reaction failure(RuntimeException e) {
        Reaction r = new Reaction();
        r.fatal = "heartbeat thread failed: " + e;
        return r;
    }

    private void waitOn(long ms) {
        try {
            logic.wait(Math.max(1, ms));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            closing = true;
        }
    }
}
