package org.apache.kafka.connect.runtime.distributed;

import io.connectbridge.connect.BridgeMemberSettings;
import io.connectbridge.connect.member.ClientAssignor;
import io.connectbridge.connect.member.ConnectGroupClient;
import io.connectbridge.connect.member.HeartbeatLoop;
import io.connectbridge.connect.member.MemberLogic;
import io.connectbridge.connect.member.MemberLogic.Assignment;
import io.connectbridge.connect.member.MemberLogic.Reaction;
import io.connectbridge.connect.member.MemberMetrics;
import io.connectbridge.connect.member.Work;
import io.connectbridge.connect.wire.ConnectGroupWire.DescribeResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.DescribedGroup;
import io.connectbridge.connect.wire.ConnectGroupWire.DescribedMember;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.storage.ConfigBackingStore;
import org.apache.kafka.connect.util.ConnectorTaskId;
import org.slf4j.Logger;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Collection;
import java.util.List;
import java.util.UUID;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * A {@link WorkerGroupMember} that speaks ConnectGroupHeartbeat (the {@code connect} group protocol)
 * to a connect-bridge coordinator instead of JoinGroup/SyncGroup.
 *
 * <p>Two threads: a {@link HeartbeatLoop} talks to the coordinator; the herder's own thread runs the
 * {@link WorkerRebalanceListener} callbacks inside {@link #ensureActive}/{@link #poll}, in the order the
 * answers asked for them. Revoke before assign: work the coordinator takes away is stopped
 * ({@code onRevoked}, which returns when it is stopped), the smaller owned set is reported at once,
 * then the assignment goes to {@code onAssigned} as fresh collections. The herder catches up with the
 * config topic to the assignment's offset before starting anything (its own check).
 *
 * <p>The superclass builds stock Connect's classic machinery, which stays inert: nothing here calls
 * it (its coordinator's heartbeat thread starts only on a join); we reuse only its {@code Metrics}.
 */
public class BridgeWorkerGroupMember extends WorkerGroupMember {
    private static final WorkerRebalanceListener NO_LISTENER = new WorkerRebalanceListener() {
        @Override
        public void onAssigned(ExtendedAssignment assignment, int generation) {
        }

        @Override
        public void onRevoked(String leader, Collection<String> connectors, Collection<ConnectorTaskId> tasks) {
        }

        @Override
        public void onPollTimeoutExpiry() {
        }
    };

    private final Logger log;
    private final ConfigBackingStore configStore;
    private final MemberLogic logic;
    private final HeartbeatLoop loop;
    private final ConnectGroupClient client;
    private final Time time;
    private final short protocolVersion;
    private final int requestTimeoutMs;
    private final MemberMetrics memberMetrics;
    private final ArrayDeque<Reaction> events = new ArrayDeque<>();
    private volatile WorkerRebalanceListener listener = NO_LISTENER;
    private volatile long configOffset;
    private boolean woken;
    private boolean needAssignment = true;
    private boolean rejoinPending;
    private boolean stopped;
    private boolean started;
    private String clientId;

    /**
     * @param clientFactory builds the client to the coordinator from the member's Kafka {@code Metrics}
     *                      (a seam for tests)
     */
    public BridgeWorkerGroupMember(DistributedConfig config, String restUrl, ConfigBackingStore configStore,
                                   Time time, String clientId, LogContext logContext, BridgeMemberSettings settings,
                                   Function<WorkerGroupMember, ConnectGroupClient> clientFactory) {
        super(config, restUrl, configStore, NO_LISTENER, time, clientId, logContext);
        this.log = logContext.logger(BridgeWorkerGroupMember.class);
        this.configStore = configStore;
        this.time = time;
        this.clientId = clientId;
        this.protocolVersion = ConnectProtocolCompatibility.compatibility(
            config.getString(DistributedConfig.CONNECT_PROTOCOL_CONFIG)).protocolVersion();
        this.requestTimeoutMs = config.getInt(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG);
        String memberId = clientId + "-" + UUID.randomUUID();
        ClientAssignor assignor = settings.clientAssignment()
            ? new ConnectIncrementalAssignor(logContext, time, protocolVersion) : null;
        this.logic = new MemberLogic(new MemberLogic.Settings(
            config.getString(DistributedConfig.GROUP_ID_CONFIG), memberId, settings.instanceId(), restUrl,
            config.getInt(DistributedConfig.REBALANCE_TIMEOUT_MS_CONFIG),
            config.getInt(DistributedConfig.SESSION_TIMEOUT_MS_CONFIG),
            config.getInt(DistributedConfig.HEARTBEAT_INTERVAL_MS_CONFIG),
            settings.serverAssignor(), assignor == null ? null : List.of(assignor.advertised())));
        this.client = clientFactory.apply(this);
        this.memberMetrics = new MemberMetrics(metrics(), this::metricsView);
        this.loop = new HeartbeatLoop(logic, client, time, this::react, () -> configOffset, requestTimeoutMs,
            Math.max(250, config.getLong(CommonClientConfigs.RETRY_BACKOFF_MS_CONFIG).intValue()), log, assignor,
            memberMetrics::recordClientAssignment, memberMetrics::recordClientAssignmentRefused);
        log.info("Joining Connect group {} with group.protocol=connect as member {}{} (connect.protocol "
                + "version {}, {})", logic.settings().groupId(), memberId,
            settings.instanceId() == null ? "" : " (group.instance.id " + settings.instanceId() + ")",
            protocolVersion, assignor == null ? "server-side assignment"
                : "client-side assignment with " + ConnectIncrementalAssignor.NAME + " when the coordinator asks");
    }

    /** The herder's listener; set once, right after the herder exists ({@code BridgeHerders}). */
    public void setListener(WorkerRebalanceListener listener) {
        this.listener = listener;
    }

    private MemberMetrics.View metricsView() {
        synchronized (logic) {
            return new MemberMetrics.View(logic.memberEpoch(), logic.owned().connectors().size(),
                logic.owned().tasks().size());
        }
    }

    // ------------------------------------------------------------------ network thread → herder thread

    private void react(Reaction r) {
        synchronized (logic) {
            if (r.fatal != null || r.revokeAll || !r.revoke.isEmpty() || r.assign != null) {
                events.add(r);
            } else if (rejoinPending && r.error == MemberLogic.NONE && logic.lastAssignment() != null) {
                // A full heartbeat after requestRejoin got no assignment (the coordinator saw nothing new):
                // hand the herder its current assignment again, so it re-checks it.
                Reaction again = new Reaction();
                Assignment last = logic.lastAssignment();
                again.assign = new Assignment(last.error(), last.work(), last.leaderId(), last.leaderUrl(),
                    last.configOffset(), logic.memberEpoch());
                events.add(again);
            } else {
                return;
            }
            if (r.error == MemberLogic.NONE || r.assign != null) {
                rejoinPending = false;
            }
            logic.notifyAll();
        }
    }

    // ------------------------------------------------------------------ herder thread

    @Override
    public void ensureActive(Supplier<Utils.UncheckedCloseable> onPoll) {
        if (!started) {
            started = true;
            configOffset = configStore.snapshot().offset(); // the herder has read the config topic to its end
            loop.start("connect-bridge-heartbeat-" + clientId);
        }
        herderPolling(true);
        try (Utils.UncheckedCloseable ignored = onPoll.get()) {
            while (true) {
                runEvents();
                synchronized (logic) {
                    if (!needAssignment && events.isEmpty()) {
                        return;
                    }
                    if (events.isEmpty()) {
                        if (consumeWakeup()) {
                            throw new WakeupException();
                        }
                        waitOn(1000);
                    }
                }
            }
        } finally {
            herderPolling(false);
        }
    }

    @Override
    public void poll(long timeout, Supplier<Utils.UncheckedCloseable> onPoll) {
        long deadline = time.milliseconds() + Math.max(0, timeout);
        herderPolling(true);
        try (Utils.UncheckedCloseable ignored = onPoll.get()) {
            while (true) {
                if (runEvents()) {
                    return;
                }
                synchronized (logic) {
                    if (!events.isEmpty()) {
                        continue;
                    }
                    if (consumeWakeup()) {
                        throw new WakeupException();
                    }
                    long left = deadline - time.milliseconds();
                    if (left <= 0) {
                        return;
                    }
                    waitOn(left);
                }
            }
        } finally {
            herderPolling(false);
        }
    }

    /** The poll timeout counts while the herder is outside poll or inside one of its callbacks. */
    private void herderPolling(boolean polling) {
        synchronized (logic) {
            logic.herderPolling(polling, time.milliseconds());
            logic.notifyAll();
        }
    }

    private boolean consumeWakeup() {
        boolean w = woken;
        woken = false;
        return w;
    }

    private void waitOn(long ms) {
        try {
            logic.wait(Math.max(1, ms));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new WakeupException();
        }
    }

    /** Runs the queued callbacks on this (the herder's) thread; true if any ran. */
    private boolean runEvents() {
        boolean ran = false;
        while (true) {
            Reaction r;
            synchronized (logic) {
                r = events.poll();
            }
            if (r == null) {
                return ran;
            }
            ran = true;
            herderPolling(false);
            try {
                if (r.revokeAll) {
                    giveEverythingUp(r);
                } else {
                    if (!r.revoke.isEmpty()) {
                        revoke(r.revoke);
                    }
                    if (r.assign != null) {
                        assign(r.assign);
                    }
                }
            } finally {
                herderPolling(true);
            }
        }
    }

    private String leaderId() {
        Assignment a = logic.lastAssignment();
        return a == null ? null : a.leaderId();
    }

    private void revoke(Work work) {
        String leader;
        synchronized (logic) {
            leader = leaderId();
        }
        long start = time.milliseconds();
        log.info("Revoking {} as the coordinator asks", work);
        listener.onRevoked(leader, work.connectorList(), work.taskList());
        long took = time.milliseconds() - start;
        synchronized (logic) {
            logic.revocationDone(work);
        }
        memberMetrics.recordRevocation(took);
        log.info("Stopped {} in {} ms; acknowledging at once", work, took);
        loop.heartbeatNow();
    }

    private void assign(Assignment a) {
        synchronized (logic) {
            if (logic.resetPending()) {
                return; // fenced since this answer: everything is being given up
            }
            logic.assignmentDelivered(a);
            needAssignment = false;
        }
        memberMetrics.recordRebalance();
        log.info("Assignment at member epoch {}: {} (leader {} at {}, config offset {}{})", a.memberEpoch(),
            a.work(), a.leaderId(), a.leaderUrl(), a.configOffset(),
            a.error() == 0 ? "" : ", error " + a.error());
        ExtendedAssignment assignment = new ExtendedAssignment(protocolVersion, a.error(), a.leaderId(), a.leaderUrl(),
            a.configOffset(), a.work().connectorList(), a.work().taskList(), new java.util.ArrayList<>(),
            new java.util.ArrayList<>(), 0);
        listener.onAssigned(assignment, a.memberEpoch());
    }

    private void giveEverythingUp(Reaction r) {
        Work all;
        String leader;
        synchronized (logic) {
            all = logic.owned().plus(logic.lastAssignment() == null ? Work.EMPTY : logic.lastAssignment().work());
            leader = leaderId();
        }
        String why = r.fatal != null ? r.fatal : r.pollTimeoutExpired ? "worker poll timeout expired, left the group"
            : r.error != 0 ? "heartbeat error " + r.error : "session lost";
        log.warn("Giving up all work {} ({}), then rejoining at member epoch 0", all, why);
        memberMetrics.recordFenced();
        if (r.pollTimeoutExpired) {
            listener.onPollTimeoutExpiry();
        }
        listener.onRevoked(leader, all.connectorList(), all.taskList());
        synchronized (logic) {
            if (r.fatal != null) {
                throw new ConnectException(r.fatal);
            }
            configOffset = configStore.snapshot().offset();
            logic.resetDone();
            needAssignment = true;
        }
        loop.heartbeatNow();
    }

    @Override
    public void wakeup() {
        synchronized (logic) {
            woken = true;
            logic.notifyAll();
        }
    }

    @Override
    public String memberId() {
        return logic.settings().memberId();
    }

    @Override
    public void requestRejoin() {
        long offset = configStore.snapshot().offset();
        synchronized (logic) {
            configOffset = offset;
            logic.requestFull();
            rejoinPending = true;
            needAssignment = true;
        }
        log.info("Rejoin requested by the herder: full heartbeat with config offset {}", offset);
        loop.heartbeatNow();
    }

    @Override
    public void maybeLeaveGroup(String leaveReason) {
        loop.sendLeave(leaveReason);
        synchronized (logic) {
            events.add(logic.startReset(new Reaction()));
            logic.notifyAll();
        }
    }

    @Override
    public String ownerUrl(String connector) {
        return ownerUrl(m -> Work.fromWire(m.assignment()).contains(connector));
    }

    @Override
    public String ownerUrl(ConnectorTaskId task) {
        return ownerUrl(m -> Work.fromWire(m.assignment()).contains(task));
    }

    private String ownerUrl(java.util.function.Predicate<DescribedMember> owns) {
        synchronized (logic) {
            Assignment a = logic.lastAssignment();
            if (a == null || !memberId().equals(a.leaderId())) {
                return null; // as stock: only the leader answers
            }
        }
        try {
            DescribeResponse resp = client.describe(logic.settings().groupId(), Math.min(requestTimeoutMs, 5000));
            for (DescribedGroup g : resp.groups()) {
                if (g.errorCode() != 0 || g.members() == null) {
                    continue;
                }
                for (DescribedMember m : g.members()) {
                    if (owns.test(m)) {
                        return m.workerUrl();
                    }
                }
            }
        } catch (IOException e) {
            log.warn("ConnectGroupDescribe failed, owner unknown: {}", e.getMessage());
        }
        return null;
    }

    @Override
    public short currentProtocolVersion() {
        return protocolVersion;
    }

    @Override
    public void revokeAssignment(ExtendedAssignment assignment) {
        Work work = Work.of(assignment.connectors(), assignment.tasks());
        listener.onRevoked(assignment.leader(), work.connectorList(), work.taskList());
        synchronized (logic) {
            logic.revocationDone(work);
        }
        loop.heartbeatNow();
    }

    @Override
    public void stop() {
        synchronized (logic) {
            if (stopped) {
                return;
            }
            stopped = true;
        }
        log.info("Stopping the Connect group member");
        loop.shutdown(true);
        client.close();
        memberMetrics.close();
        super.stop();
    }

    /** The member's logic, for tests. */
    MemberLogic logic() {
        return logic;
    }

    List<Reaction> pendingEvents() {
        synchronized (logic) {
            return List.copyOf(events);
        }
    }
}
