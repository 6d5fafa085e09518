package io.connectbridge.connect.member;

import io.connectbridge.connect.member.MemberLogic.Reaction;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallMember;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareMember;
import org.apache.kafka.common.utils.Time;
import org.slf4j.Logger;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.function.LongSupplier;

/**
 * The member's network thread: heartbeats at the interval the coordinator returns, at once when the
 * logic asks (a revocation acknowledged, a rejoin), and fences the member when its session must have
 * expired at the coordinator, reachable or not. Every {@link Reaction} goes to {@code sink}, which
 * hands the work changes to the herder thread. All access to the {@link MemberLogic} is under its
 * monitor.
 *
 * <p>It also runs the member's side of client-side assignment (COMPUTE_ASSIGNMENT: PrepareAssignment,
 * the {@link ClientAssignor}, InstallAssignment) and, like stock Connect's heartbeat thread, leaves the
 * group when the herder has not polled for the rebalance timeout (the herder then gives its work up
 * on its next poll and the member rejoins).
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
    private final ClientAssignor assignor;
    private final Runnable onInstalled;
    private final Runnable onRefused;
    private long nextAt;
    private long lastSentAt = Long.MIN_VALUE / 2;
    private volatile boolean closing;
    private Thread thread;

    public HeartbeatLoop(MemberLogic logic, ConnectGroupClient client, Time time, Consumer<Reaction> sink,
                         LongSupplier configOffset, int requestTimeoutMs, int retryBackoffMs, Logger log) {
        this(logic, client, time, sink, configOffset, requestTimeoutMs, retryBackoffMs, log, null, () -> { }, () -> { });
    }

    /**
     * @param assignor    computes the group's target when the coordinator asks this member (null: the
     *                    member advertises no client assignor and is never asked)
     * @param onInstalled called after each target this member installed
     * @param onRefused   called after each target the coordinator refused (INVALID_ASSIGNMENT)
     */
    public HeartbeatLoop(MemberLogic logic, ConnectGroupClient client, Time time, Consumer<Reaction> sink,
                         LongSupplier configOffset, int requestTimeoutMs, int retryBackoffMs, Logger log,
                         ClientAssignor assignor, Runnable onInstalled, Runnable onRefused) {
        this.assignor = assignor;
        this.onInstalled = onInstalled;
        this.onRefused = onRefused;
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
                boolean pollTimedOut;
                synchronized (logic) {
                    pollTimedOut = logic.pollTimeoutExpired(now);
                }
                if (pollTimedOut) {
                    leaveOnPollTimeout();
                    continue;
                }
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
                    Long pollTimeoutAt = logic.pollTimeoutAtMs();
                    if (pollTimeoutAt != null) {
                        wakeAt = Math.min(wakeAt, pollTimeoutAt);
                    }
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
                if (reaction.computeAssignment && assignor != null) {
                    computeAssignment(timeout);
                }
            }
        } catch (RuntimeException e) {
            log.error("Connect group heartbeat thread failed", e);
            synchronized (logic) {
                sink.accept(logic.startReset(failure(e)));
            }
        }
    }

    /**
     * The herder has not polled for the rebalance timeout: leave (epoch -1, as stock's heartbeat thread
     * does), so the coordinator can move the work on; the herder gives it up on its next poll, told by
     * {@code onPollTimeoutExpiry}, and the member then rejoins at epoch 0.
     */
    private void leaveOnPollTimeout() {
        log.warn("The herder has not polled for rebalance.timeout.ms ({} ms): leaving the Connect group; the work "
            + "is given up on the next poll, then the worker rejoins", logic.settings().rebalanceTimeoutMs());
        sendLeave("worker poll timeout has expired");
        synchronized (logic) {
            Reaction r = new Reaction();
            r.pollTimeoutExpired = true;
            sink.accept(logic.startReset(r));
        }
    }

    /**
     * Client-side assignment (COMPUTE_ASSIGNMENT is a signal: the rest of the answer was applied):
     * PrepareAssignment, the assignor, InstallAssignment. A refusal (INVALID_ASSIGNMENT: the group
     * moved on, or another member took the job) is logged; the coordinator signals again if a target
     * is still due.
     */
    private void computeAssignment(long timeoutMs) {
        String groupId;
        String memberId;
        int epoch;
        synchronized (logic) {
            if (logic.resetPending()) {
                return; // the member is giving everything up: it is no longer the one to ask
            }
            // A member of a group assigned client-side waits at epoch 0 for the first target, which
            // it may be asked to compute itself.
            groupId = logic.settings().groupId();
            memberId = logic.settings().memberId();
            epoch = logic.memberEpoch();
        }
        try {
            PrepareAssignmentResponse prepared = client.prepare(new PrepareAssignmentRequest(groupId, memberId, epoch),
                timeoutMs);
            if (prepared.errorCode() != 0) {
                log.info("PrepareAssignment answered error {} ({}): not computing", prepared.errorCode(),
                    prepared.errorMessage());
                return;
            }
            Map<String, Work> target;
            try {
                target = assignor.assign(prepared);
            } catch (RuntimeException e) {
                log.error("Client-side assignor {} failed at group epoch {}; the coordinator will choose again",
                    prepared.assignorName(), prepared.groupEpoch(), e);
                return;
            }
            short metadataVersion = assignor.advertised().metadataVersion();
            List<InstallMember> members = new ArrayList<>();
            for (PrepareMember m : prepared.members()) {
                Work w = target.getOrDefault(m.memberId(), Work.EMPTY);
                members.add(new InstallMember(m.memberId(), w.toWire(), metadataVersion, new byte[0]));
            }
            InstallAssignmentResponse installed = client.install(new InstallAssignmentRequest(groupId, memberId, epoch,
                prepared.groupEpoch(), (byte) 0, members), timeoutMs);
            if (installed.errorCode() == 0) {
                log.info("Installed the group's target at group epoch {} computed with {}: {}",
                    prepared.groupEpoch(), prepared.assignorName(), target);
                onInstalled.run();
                heartbeatNow(); // fetch our own part of the new target
            } else if (installed.errorCode() == MemberLogic.INVALID_ASSIGNMENT) {
                log.warn("InstallAssignment at group epoch {} refused as INVALID_ASSIGNMENT ({}): waiting for the "
                    + "coordinator's next signal", prepared.groupEpoch(), installed.errorMessage());
                onRefused.run();
            } else {
                log.info("InstallAssignment at group epoch {} answered error {} ({})", prepared.groupEpoch(),
                    installed.errorCode(), installed.errorMessage());
            }
        } catch (IOException e) {
            log.info("Client-side assignment interrupted: {}", e.getMessage());
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
