package io.connectbridge.connect.member;

import io.connectbridge.connect.wire.ConnectGroupWire.Assignor;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;

import java.util.List;

/**
 * A new-protocol Connect member's group logic, free of I/O, threads and clocks (time comes in as an
 * argument); the Java counterpart of the project's {@code workers/new_protocol.py}.
 *
 * <p>It decides what each ConnectGroupHeartbeat carries (everything when joining, after an error or
 * when asked; otherwise only what changed) and what the worker must do with each answer:
 * <ul>
 *   <li><b>revoke before assign</b>: work the coordinator no longer assigns is handed to the herder to
 *       stop first; only when that is done ({@link #revocationDone}) does the member report the smaller
 *       owned set, at once (the acknowledgement), and the new assignment follows;</li>
 *   <li><b>fencing</b> (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) and a <b>session</b> the coordinator must
 *       consider expired (counted from the send time of the last answered heartbeat): give everything up,
 *       and once that is done ({@link #resetDone}) rejoin at epoch 0 under the same member id;</li>
 *   <li>FENCED_INSTANCE_ID is fatal, as for a KIP-848 consumer.</li>
 * </ul>
 * Not thread-safe: the member calls it under one lock.
 */
public final class MemberLogic {
    public static final short NONE = 0;
    public static final short COORDINATOR_LOAD_IN_PROGRESS = 14;
    public static final short COORDINATOR_NOT_AVAILABLE = 15;
    public static final short NOT_COORDINATOR = 16;
    public static final short UNKNOWN_MEMBER_ID = 25;
    public static final short FENCED_INSTANCE_ID = 82;
    public static final short FENCED_MEMBER_EPOCH = 110;
    public static final short UNRELEASED_INSTANCE_ID = 111;
    public static final short UNSUPPORTED_ASSIGNOR = 112;
    public static final short COMPUTE_ASSIGNMENT = 1000;
    public static final short INVALID_ASSIGNMENT = 1001;

    /** The assignment error a coordinator sends when the worker is ahead of its view (Connect's code). */
    public static final byte CONFIG_MISMATCH = 1;

    public static final int LEAVE_EPOCH = -1;
    public static final int STATIC_LEAVE_EPOCH = -2;

    /** The member's fixed settings. */
    public record Settings(String groupId, String memberId, String instanceId, String workerUrl,
                           int rebalanceTimeoutMs, int sessionTimeoutMs, int heartbeatIntervalMs,
                           String serverAssignor, List<Assignor> clientAssignors) {
    }

    /** What the coordinator last assigned, beyond the work: Connect's assignment fields. */
    public record Assignment(byte error, Work work, String leaderId, String leaderUrl, long configOffset,
                             int memberEpoch) {
    }

    /** What the member must do after an answer or a timer. */
    public static final class Reaction {
        /** Stop this work before anything else (never together with {@link #revokeAll}). */
        public Work revoke = Work.EMPTY;
        /** Deliver this assignment to the herder (after {@link #revoke}, if any). */
        public Assignment assign;
        /** Give everything up (fenced or session lost), then rejoin at epoch 0. */
        public boolean revokeAll;
        public boolean heartbeatNow;
        public int intervalMs;
        /** The answer matched no heartbeat in flight (a duplicate): it changed nothing. */
        public boolean stale;
        /** The coordinator chose this member to compute the group's assignment. */
        public boolean computeAssignment;
        public boolean epochChanged;
        /** The coordinator must be looked up again (NOT_COORDINATOR, unavailable, lost connection). */
        public boolean rediscover;
        /** Why the process must stop, or null. */
        public String fatal;
        /** The error the answer carried (0 when none). */
        public short error;
        /** The herder did not poll for the rebalance timeout: the member left; tell the herder first. */
        public boolean pollTimeoutExpired;

        @Override
        public String toString() {
            return "Reaction{revoke=" + revoke + ", assign=" + assign + ", revokeAll=" + revokeAll
                + ", heartbeatNow=" + heartbeatNow + ", intervalMs=" + intervalMs + ", stale=" + stale
                + ", compute=" + computeAssignment + ", error=" + error + ", fatal=" + fatal + "}";
        }
    }

    private final Settings settings;
    private int memberEpoch;
    private Work owned = Work.EMPTY;
    private Work sentOwned;
    private boolean full = true;
    private int intervalMs;
    private long sentAt;
    private Long sessionStart;
    private boolean awaiting;
    private boolean resetPending;
    private Work revoking = Work.EMPTY;
    private Assignment lastAssignment;
    private String fatal;
    private long lastConfigOffset = -1;
    private boolean herderPolling = true;
    private long herderPollChangedMs;

    public MemberLogic(Settings settings) {
        if (settings.memberId() == null || settings.memberId().isEmpty()) {
            throw new IllegalArgumentException("the member id is chosen by the member and must not be empty");
        }
        this.settings = settings;
        this.intervalMs = settings.heartbeatIntervalMs();
    }

    public Settings settings() {
        return settings;
    }

    public int memberEpoch() {
        return memberEpoch;
    }

    public Work owned() {
        return owned;
    }

    public Assignment lastAssignment() {
        return lastAssignment;
    }

    public int intervalMs() {
        return intervalMs;
    }

    public String fatal() {
        return fatal;
    }

    /** Everything is being given up and the herder has not confirmed it yet: no heartbeat may go out. */
    public boolean resetPending() {
        return resetPending;
    }

    public boolean awaiting() {
        return awaiting;
    }

    /** The next heartbeat carries every field (after {@code requestRejoin}, an error or a reconnect). */
    public void requestFull() {
        full = true;
    }

    /**
     * The next heartbeat. {@code configOffset} is the worker's config topic position; it is sent when
     * the heartbeat is full or the position moved.
     */
    public HeartbeatRequest heartbeatRequest(long nowMs, long configOffset) {
        if (resetPending) {
            throw new IllegalStateException("no heartbeat while giving everything up");
        }
        sentAt = nowMs;
        awaiting = true;
        if (full || memberEpoch == 0) {
            sentOwned = owned;
            lastConfigOffset = configOffset;
            return new HeartbeatRequest(settings.groupId(), settings.memberId(), memberEpoch, settings.instanceId(),
                null, settings.rebalanceTimeoutMs(), settings.workerUrl(), configOffset, settings.serverAssignor(),
                settings.clientAssignors(), owned.toWire());
        }
        Work report = null;
        if (!owned.equals(sentOwned)) {
            report = sentOwned = owned;
        }
        long offset = -1;
        if (configOffset != lastConfigOffset) {
            offset = lastConfigOffset = configOffset;
        }
        return new HeartbeatRequest(settings.groupId(), settings.memberId(), memberEpoch, null, null, -1, null,
            offset, null, null, report == null ? null : report.toWire());
    }

    /** The leave heartbeat: epoch -1, or -2 for a static member (its work waits for it). */
    public HeartbeatRequest leaveRequest() {
        int epoch = settings.instanceId() != null ? STATIC_LEAVE_EPOCH : LEAVE_EPOCH;
        return new HeartbeatRequest(settings.groupId(), settings.memberId(), epoch, settings.instanceId(), null, -1,
            null, -1, null, null, null);
    }

    /** The request failed on the way (no connection, timeout): as COORDINATOR_NOT_AVAILABLE. */
    public Reaction onTransportFailure() {
        awaiting = false;
        full = true;
        Reaction r = new Reaction();
        r.error = COORDINATOR_NOT_AVAILABLE;
        r.intervalMs = intervalMs;
        r.rediscover = true;
        return r;
    }

    public Reaction onResponse(HeartbeatResponse resp) {
        Reaction r = new Reaction();
        if (!awaiting) {
            r.stale = true;
            return r;
        }
        awaiting = false;
        r.error = resp.errorCode();
        switch (resp.errorCode()) {
            case NONE, COMPUTE_ASSIGNMENT -> {
            }
            case FENCED_INSTANCE_ID -> {
                fatal = "ConnectGroupHeartbeat failed: FENCED_INSTANCE_ID (another worker took group.instance.id "
                    + settings.instanceId() + ")";
                r.fatal = fatal;
                return startReset(r);
            }
            case FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID -> {
                return startReset(r);
            }
            default -> {
                full = true;
                r.intervalMs = intervalMs;
                r.rediscover = resp.errorCode() == NOT_COORDINATOR || resp.errorCode() == COORDINATOR_NOT_AVAILABLE;
                return r;
            }
        }
        full = false;
        sessionStart = sentAt;
        if (resp.heartbeatIntervalMs() > 0) {
            intervalMs = resp.heartbeatIntervalMs();
        }
        r.intervalMs = intervalMs;
        r.computeAssignment = resp.errorCode() == COMPUTE_ASSIGNMENT;
        if (resp.memberEpoch() != memberEpoch) {
            memberEpoch = resp.memberEpoch();
            r.epochChanged = true;
        }
        if (resp.assignment() != null) {
            var a = resp.assignment();
            Work target = Work.fromWire(a.connectorsAndTasks());
            Assignment assignment = new Assignment(a.error(), target, a.leaderId(), a.leaderUrl(), a.configOffset(),
                memberEpoch);
            Work revoke = owned.minus(target).minus(revoking);
            if (!revoke.isEmpty()) {
                revoking = revoking.plus(revoke);
                r.revoke = revoke;
            }
            if (!revoke.isEmpty() || !assignment.equals(lastAssignment)) {
                // The same assignment again (the answer to a full heartbeat, e.g. while waiting at
                // epoch 0 for a client-side target) changes nothing for the herder.
                r.assign = assignment;
            }
        }
        return r;
    }

    /** The herder stopped {@code revoked}: report it at once (the acknowledgement). */
    public void revocationDone(Work revoked) {
        owned = owned.minus(revoked);
        revoking = revoking.minus(revoked);
    }

    /** The herder was handed {@code a}: it owns that work from now on (it starts it after catching up). */
    public void assignmentDelivered(Assignment a) {
        if (resetPending) {
            return; // fenced meanwhile: the reset wins, the assignment is void
        }
        lastAssignment = a;
        owned = a.work().minus(revoking);
    }

    /** Stop everything once the coordinator must consider our session expired. */
    public Reaction expireSession(long nowMs) {
        if (sessionStart == null || resetPending || nowMs - sessionStart < settings.sessionTimeoutMs()) {
            return null;
        }
        return startReset(new Reaction());
    }

    /** When the session expires if no answer comes, or null when there is no session. */
    public Long sessionExpiryMs() {
        return sessionStart == null ? null : sessionStart + settings.sessionTimeoutMs();
    }

    /**
     * The herder thread entered ({@code polling}) or left {@code poll}/{@code ensureActive}, or a
     * callback it runs there. Out of them for the rebalance timeout, it is stuck, as stock Connect's
     * {@code rebalance.timeout.ms} poll timeout says.
     */
    public void herderPolling(boolean polling, long nowMs) {
        herderPolling = polling;
        herderPollChangedMs = nowMs;
    }

    /** When the herder's poll timeout expires if it does not poll, or null (polling, or not joined). */
    public Long pollTimeoutAtMs() {
        if (herderPolling || resetPending || memberEpoch <= 0) {
            return null;
        }
        return herderPollChangedMs + settings.rebalanceTimeoutMs();
    }

    /** The herder has not polled for the rebalance timeout: the member must leave the group. */
    public boolean pollTimeoutExpired(long nowMs) {
        Long at = pollTimeoutAtMs();
        return at != null && nowMs >= at;
    }

    /** Give everything up (also on a poll timeout or a leave). */
    public Reaction startReset(Reaction r) {
        r.revokeAll = true;
        r.heartbeatNow = true;
        resetPending = true;
        awaiting = false;
        sessionStart = null;
        r.epochChanged = memberEpoch != 0;
        memberEpoch = 0;
        full = true;
        return r;
    }

    /** The herder gave everything up: rejoin at epoch 0 with the same member id. */
    public void resetDone() {
        owned = Work.EMPTY;
        revoking = Work.EMPTY;
        lastAssignment = null;
        resetPending = false;
        full = true;
    }
}
