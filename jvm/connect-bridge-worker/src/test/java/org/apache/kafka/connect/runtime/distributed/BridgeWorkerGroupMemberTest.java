package org.apache.kafka.connect.runtime.distributed;

import io.connectbridge.connect.BridgeMemberSettings;
import io.connectbridge.connect.member.ConnectGroupClient;
import io.connectbridge.connect.member.MemberLogic;
import io.connectbridge.connect.member.Work;
import io.connectbridge.connect.member.MemberMetrics;
import io.connectbridge.connect.wire.ConnectGroupWire.Assignment;
import io.connectbridge.connect.wire.ConnectGroupWire.ConfiguredConnector;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallMember;
import io.connectbridge.connect.wire.ConnectGroupWire.MemberAssignor;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareMember;
import io.connectbridge.connect.wire.ConnectGroupWire.DescribeResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentResponse;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.storage.ClusterConfigState;
import org.apache.kafka.connect.storage.ConfigBackingStore;
import org.apache.kafka.connect.util.ConnectorTaskId;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BooleanSupplier;
import java.util.function.Function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The member with a herder thread and a listener that record what happens, against a scripted
 * coordinator (no network): revoke before acknowledge, fresh collections, fencing, session loss and
 * the herder's poll timeout.
 */
class BridgeWorkerGroupMemberTest {
    static final int SESSION_MS = 1500;
    static final int REBALANCE_MS = 1200;
    /** How late a timer may fire on a loaded CI machine (2 cores shared with brokers and workers):
     *  bounds that say "not never", wide enough not to flake. */
    static final int LATE_MS = 5000;
    static final Work AB = Work.of(List.of("a", "b"), List.of(new ConnectorTaskId("a", 0), new ConnectorTaskId("b", 0)));
    static final Work A = Work.of(List.of("a"), List.of(new ConnectorTaskId("a", 0)));

    /** A scripted coordinator: answers every heartbeat with {@link #target} while {@link #up}. */
    static final class FakeCoordinator implements ConnectGroupClient {
        final List<Timed<HeartbeatRequest>> requests = new CopyOnWriteArrayList<>();
        volatile boolean up = true;
        volatile Work target = Work.EMPTY;
        volatile int epoch = 1;
        volatile short nextError = 0;
        /** An error code the next answer carries with its normal body (COMPUTE_ASSIGNMENT is a signal). */
        volatile short nextSignal = 0;
        /** The group PrepareAssignment shows, and how InstallAssignment answers (client-side assignment). */
        volatile Function<PrepareAssignmentRequest, PrepareAssignmentResponse> onPrepare;
        volatile Function<InstallAssignmentRequest, InstallAssignmentResponse> onInstall;
        final List<Timed<InstallAssignmentRequest>> installs = new CopyOnWriteArrayList<>();
        private Work sent;

        @Override
        public synchronized HeartbeatResponse heartbeat(HeartbeatRequest request, long timeoutMs) throws IOException {
            requests.add(new Timed<>(System.currentTimeMillis(), request));
            if (!up) {
                sleep(Math.min(timeoutMs, 50));
                throw new IOException("coordinator unreachable");
            }
            if (request.memberEpoch() < 0) {
                return new HeartbeatResponse(0, (short) 0, null, request.memberId(), request.memberEpoch(), 50, null);
            }
            if (nextError != 0) {
                short e = nextError;
                nextError = 0;
                return new HeartbeatResponse(0, e, "scripted", null, 0, 0, null);
            }
            Assignment a = null;
            if (request.memberEpoch() == 0 || !target.equals(sent)) {
                sent = target;
                a = new Assignment((byte) 0, target.toWire(), request.memberId(), "http://w1/", 0L, (short) 0,
                    new byte[0]);
            }
            short signal = nextSignal;
            nextSignal = 0;
            return new HeartbeatResponse(0, signal, null, request.memberId(), epoch, 50, a);
        }

        @Override
        public DescribeResponse describe(String groupId, long timeoutMs) {
            return new DescribeResponse(0, List.of());
        }

        @Override
        public PrepareAssignmentResponse prepare(PrepareAssignmentRequest request, long timeoutMs) throws IOException {
            if (onPrepare == null) {
                throw new IOException("not used");
            }
            return onPrepare.apply(request);
        }

        @Override
        public InstallAssignmentResponse install(InstallAssignmentRequest request, long timeoutMs) throws IOException {
            installs.add(new Timed<>(System.currentTimeMillis(), request));
            if (onInstall == null) {
                throw new IOException("not used");
            }
            return onInstall.apply(request);
        }

        @Override
        public void coordinatorLost(String why) {
        }

        @Override
        public void wakeup() {
        }

        @Override
        public void close() {
        }
    }

    record Timed<T>(long atMs, T value) {
    }

    /** What the herder was told, in order, with the times the callbacks started and returned. */
    static final class RecordingListener implements WorkerRebalanceListener {
        final List<Timed<String>> events = new CopyOnWriteArrayList<>();
        final List<ExtendedAssignment> assignments = new CopyOnWriteArrayList<>();
        final List<Timed<Work>> revokedReturned = new CopyOnWriteArrayList<>();
        volatile long revokeSleepMs;
        volatile Runnable duringRevoke = () -> { };

        @Override
        public void onAssigned(ExtendedAssignment assignment, int generation) {
            assignments.add(assignment);
            events.add(new Timed<>(System.currentTimeMillis(), "assigned " + generation + " "
                + Work.of(assignment.connectors(), assignment.tasks())));
        }

        @Override
        public void onRevoked(String leader, Collection<String> connectors, Collection<ConnectorTaskId> tasks) {
            Work w = Work.of(connectors, tasks);
            events.add(new Timed<>(System.currentTimeMillis(), "revoked " + w));
            sleep(revokeSleepMs);
            duringRevoke.run();
            revokedReturned.add(new Timed<>(System.currentTimeMillis(), w));
        }

        @Override
        public void onPollTimeoutExpiry() {
            events.add(new Timed<>(System.currentTimeMillis(), "poll timeout"));
        }
    }

    final FakeCoordinator coordinator = new FakeCoordinator();
    final RecordingListener listener = new RecordingListener();
    volatile boolean herderStop;
    volatile long stallUntilMs;
    boolean clientAssignment;
    BridgeWorkerGroupMember member;
    Thread herder;

    void start() {
        Map<String, String> props = new HashMap<>();
        props.put("bootstrap.servers", "localhost:9");
        props.put("group.id", "g");
        props.put("config.storage.topic", "c");
        props.put("offset.storage.topic", "o");
        props.put("status.storage.topic", "s");
        props.put("key.converter", "org.apache.kafka.connect.json.JsonConverter");
        props.put("value.converter", "org.apache.kafka.connect.json.JsonConverter");
        props.put("session.timeout.ms", String.valueOf(SESSION_MS));
        props.put("heartbeat.interval.ms", "50");
        props.put("rebalance.timeout.ms", String.valueOf(REBALANCE_MS));
        props.put("retry.backoff.ms", "50");
        ConfigBackingStore store = (ConfigBackingStore) Proxy.newProxyInstance(getClass().getClassLoader(),
            new Class<?>[] {ConfigBackingStore.class},
            (proxy, method, args) -> method.getName().equals("snapshot") ? ClusterConfigState.EMPTY : null);
        DistributedConfig config = new DistributedConfig(props);
        try {
            // No Kafka here: the member's metrics context would look the cluster id up (cached in this field).
            java.lang.reflect.Field id = org.apache.kafka.connect.runtime.WorkerConfig.class
                .getDeclaredField("kafkaClusterId");
            id.setAccessible(true);
            id.set(config, "test-cluster");
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
        member = new BridgeWorkerGroupMember(config, "http://w1/", store, Time.SYSTEM, "w1",
            new LogContext("[test] "), new BridgeMemberSettings(BridgeMemberSettings.GroupProtocol.CONNECT, null, null,
            clientAssignment), m -> coordinator);
        member.setListener(listener);
        herder = new Thread(() -> {
            while (!herderStop) {
                long stall = stallUntilMs - System.currentTimeMillis();
                if (stall > 0) {
                    sleep(stall); // a herder stuck outside poll (a slow connector call, say)
                    continue;
                }
                try {
                    member.ensureActive(() -> () -> { });
                    member.poll(100, () -> () -> { });
                } catch (WakeupException e) {
                    // as the herder: go round again
                }
            }
        }, "herder");
        herder.start();
    }

    @AfterEach
    void stop() throws InterruptedException {
        herderStop = true;
        if (herder != null) {
            herder.join(5000);
        }
        if (member != null) {
            member.stop();
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(Math.max(0, ms));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void await(String what, BooleanSupplier condition) {
        long deadline = System.currentTimeMillis() + 10000;
        while (!condition.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                fail("timed out waiting for " + what);
            }
            sleep(10);
        }
    }

    List<HeartbeatRequest> reporting(Work owned) {
        List<HeartbeatRequest> out = new ArrayList<>();
        for (Timed<HeartbeatRequest> r : coordinator.requests) {
            if (r.value().connectorsAndTasks() != null && Work.fromWire(r.value().connectorsAndTasks()).equals(owned)) {
                out.add(r.value());
            }
        }
        return out;
    }

    long firstReportAfter(Work owned, long sinceMs) {
        for (Timed<HeartbeatRequest> r : coordinator.requests) {
            HeartbeatRequest q = r.value();
            if (r.atMs() >= sinceMs && q.connectorsAndTasks() != null && q.memberEpoch() > 0
                && Work.fromWire(q.connectorsAndTasks()).equals(owned)) {
                return r.atMs();
            }
        }
        return -1;
    }

    void joinWith(Work work) {
        coordinator.target = work;
        start();
        await("the first assignment", () -> !listener.assignments.isEmpty());
        await("owned " + work + " reported", () -> !reporting(work).isEmpty());
    }

    @Test
    void theRevocationIsAcknowledgedOnlyAfterOnRevokedReturns() {
        joinWith(AB);
        listener.revokeSleepMs = 2000; // many heartbeat intervals, even on a loaded machine
        long[] checkedAt = new long[1];
        listener.duringRevoke = () -> {
            checkedAt[0] = System.currentTimeMillis();
            assertTrue(reporting(A).isEmpty(), "the smaller owned set was reported while stopping: "
                + coordinator.requests);
        };
        long revokeAsked = System.currentTimeMillis();
        coordinator.epoch = 2;
        coordinator.target = A;
        await("the revocation returned", () -> !listener.revokedReturned.isEmpty());
        assertEquals(AB.minus(A), listener.revokedReturned.get(0).value());
        long returned = listener.revokedReturned.get(0).atMs();
        await("the acknowledgement", () -> firstReportAfter(A, revokeAsked) >= 0);
        assertTrue(firstReportAfter(A, revokeAsked) >= returned, "acknowledged before onRevoked returned");
        assertTrue(checkedAt[0] > 0);
        // After it, the herder gets the new assignment.
        await("assigned A", () -> listener.events.stream().anyMatch(e -> e.value().equals("assigned 2 " + A)));
        assertTrue(heartbeatsBetween(revokeAsked + 100, returned) >= 3,
            "heartbeats went on while the herder was stopping the work (it is not blocked)");
    }

    long heartbeatsBetween(long fromMs, long toMs) {
        return coordinator.requests.stream().filter(r -> r.atMs() >= fromMs && r.atMs() <= toMs).count();
    }

    @Test
    void everyAssignmentHandsTheHerderFreshMutableCollections() {
        joinWith(AB);
        coordinator.epoch = 2;
        coordinator.target = AB.plus(Work.of(List.of("c"), List.of()));
        await("a second assignment", () -> listener.assignments.size() >= 2);
        ExtendedAssignment first = listener.assignments.get(0);
        ExtendedAssignment second = listener.assignments.get(1);
        assertNotSame(first.connectors(), second.connectors());
        assertNotSame(first.tasks(), second.tasks());
        // The herder keeps the assignment and removes from it (onRevoked): that must not touch later ones.
        first.connectors().clear();
        first.tasks().clear();
        assertEquals(List.of("a", "b", "c"), second.connectors());
        assertEquals(2, second.tasks().size());
        second.connectors().remove("c");
        coordinator.epoch = 3;
        coordinator.target = AB;
        await("a third assignment", () -> listener.assignments.size() >= 3);
        assertEquals(List.of("a", "b"), listener.assignments.get(2).connectors());
    }

    @Test
    void fencedGivesEverythingUpAndRejoinsAtEpochZeroWithTheSameId() {
        joinWith(AB);
        String memberId = coordinator.requests.get(0).value().memberId();
        long fencedAt = System.currentTimeMillis();
        coordinator.nextError = MemberLogic.FENCED_MEMBER_EPOCH;
        await("everything revoked", () -> listener.revokedReturned.stream().anyMatch(r -> r.value().equals(AB)));
        long revokedAt = listener.revokedReturned.get(listener.revokedReturned.size() - 1).atMs();
        await("the rejoin", () -> coordinator.requests.stream().anyMatch(r -> r.atMs() >= revokedAt
            && r.value().memberEpoch() == 0));
        HeartbeatRequest rejoin = coordinator.requests.stream().filter(r -> r.atMs() >= revokedAt
            && r.value().memberEpoch() == 0).findFirst().orElseThrow().value();
        assertEquals(memberId, rejoin.memberId());
        assertEquals(Work.EMPTY, Work.fromWire(rejoin.connectorsAndTasks()));
        assertTrue(coordinator.requests.stream().noneMatch(r -> r.atMs() > fencedAt && r.atMs() < revokedAt
            && r.value().memberEpoch() == 0), "rejoined before the work was stopped");
    }

    @Test
    void aSessionWithoutAnswersGivesEverythingUpWithinTheSessionTimeout() {
        joinWith(AB);
        coordinator.up = false;
        long lastAnsweredSend = coordinator.requests.get(coordinator.requests.size() - 1).atMs();
        await("everything revoked", () -> listener.revokedReturned.stream().anyMatch(r -> r.value().equals(AB)));
        long revokeStarted = listener.events.stream().filter(e -> e.value().equals("revoked " + AB))
            .findFirst().orElseThrow().atMs();
        assertTrue(revokeStarted <= lastAnsweredSend + SESSION_MS + LATE_MS,
            "work stopped " + (revokeStarted - lastAnsweredSend) + " ms after the last answered send");
        assertTrue(revokeStarted >= lastAnsweredSend + SESSION_MS - 300, "work stopped too early");
        coordinator.up = true;
        await("the rejoin at epoch 0", () -> coordinator.requests.stream().anyMatch(r -> r.atMs() > revokeStarted
            && r.value().memberEpoch() == 0));
    }

    @Test
    void aHerderThatDoesNotPollForTheRebalanceTimeoutLeavesThenGivesUpAndRejoins() {
        joinWith(AB);
        long stalledAt = System.currentTimeMillis();
        stallUntilMs = stalledAt + REBALANCE_MS + LATE_MS;
        await("the leave", () -> coordinator.requests.stream().anyMatch(r -> r.value().memberEpoch() == -1));
        long leftAt = coordinator.requests.stream().filter(r -> r.value().memberEpoch() == -1).findFirst()
            .orElseThrow().atMs();
        assertTrue(leftAt >= stalledAt + REBALANCE_MS - 200, "left " + (leftAt - stalledAt) + " ms into the stall");
        assertTrue(leftAt < stallUntilMs, "left while the herder was still stuck");
        assertTrue(listener.events.stream().noneMatch(e -> e.value().startsWith("revoked")),
            "nothing runs on the herder's behalf while it is stuck");
        await("everything revoked", () -> listener.revokedReturned.stream().anyMatch(r -> r.value().equals(AB)));
        List<String> order = listener.events.stream().map(Timed::value).toList();
        int expiry = order.indexOf("poll timeout");
        assertTrue(expiry >= 0 && order.indexOf("revoked " + AB) == expiry + 1, order.toString());
        assertTrue(listener.events.get(expiry).atMs() >= stallUntilMs - 50, "told on the next poll");
        await("the rejoin at epoch 0", () -> coordinator.requests.stream().anyMatch(r -> r.atMs() > leftAt
            && r.value().memberEpoch() == 0));
        await("work again", () -> listener.events.stream().filter(e -> e.atMs() > leftAt)
            .anyMatch(e -> e.value().equals("assigned 1 " + AB)));
    }

    // ------------------------------------------------------------------ client-side assignment

    static final List<ConfiguredConnector> A1_B1 = List.of(new ConfiguredConnector("a", 1),
        new ConfiguredConnector("b", 1));

    /** PrepareAssignment's answer: the group at {@code groupEpoch}, its last installed target at
     *  {@code assignmentEpoch}, {@code members} (id -> current target) all advertising connect-incremental. */
    static PrepareAssignmentResponse prepared(int groupEpoch, int assignmentEpoch, Map<String, Work> members) {
        List<PrepareMember> out = new ArrayList<>();
        members.forEach((id, work) -> out.add(new PrepareMember(id, assignmentEpoch, null, "http://" + id + "/", 0L,
            new MemberAssignor((short) 2, (byte) 0, new byte[0]), work.toWire())));
        return new PrepareAssignmentResponse(0, (short) 0, null, groupEpoch, assignmentEpoch,
            ConnectIncrementalAssignor.NAME, 0L, A1_B1, out);
    }

    double memberMetric(String name) {
        return ((Number) member.metrics().metric(member.metrics().metricName(name, MemberMetrics.GROUP))
            .metricValue()).doubleValue();
    }

    static Map<String, Work> installedTargets(InstallAssignmentRequest request) {
        Map<String, Work> out = new java.util.TreeMap<>();
        for (InstallMember m : request.members()) {
            out.put(m.memberId(), Work.fromWire(m.connectorsAndTasks()));
        }
        return out;
    }

    /**
     * The member computes the group's target (COMPUTE_ASSIGNMENT, PrepareAssignment, Connect's assignor,
     * InstallAssignment) for a group that moved on meanwhile: the coordinator refuses it with
     * INVALID_ASSIGNMENT. The member applies none of it (the herder is told nothing, the heartbeats go on
     * reporting the work it owns), counts the refusal, installs nothing more on its own, and on the
     * coordinator's next signal computes again from the group as it is now, installs that, and the herder
     * converges on its part of it, revoke before assign.
     */
    @Test
    void anInvalidAssignmentAppliesNothingAndTheNextSignalConverges() {
        clientAssignment = true;
        joinWith(AB);
        String me = coordinator.requests.get(0).value().memberId();
        assertTrue(coordinator.requests.get(0).value().clientAssignors().stream()
            .anyMatch(a -> a.name().equals(ConnectIncrementalAssignor.NAME)), "no client assignor advertised");
        // The group as the member is told it: itself with a, b, a-0, b-0 and a new member w2 with nothing.
        // By the time the target arrives the group is at epoch 6 (a third member joined): refused.
        coordinator.onPrepare = r -> prepared(5, 1, Map.of(me, AB, "w2", Work.EMPTY));
        coordinator.onInstall = r -> new InstallAssignmentResponse(0, MemberLogic.INVALID_ASSIGNMENT,
            "group epoch " + r.groupEpoch() + " is not the group's epoch 6");
        int eventsBefore = listener.events.size();
        coordinator.nextSignal = MemberLogic.COMPUTE_ASSIGNMENT;
        await("the refused install", () -> coordinator.installs.size() == 1);
        InstallAssignmentRequest refused = coordinator.installs.get(0).value();
        long refusedAt = coordinator.installs.get(0).atMs();
        assertEquals(5, refused.groupEpoch());
        assertEquals(1, refused.memberEpoch());
        ConnectIncrementalAssignorTest.assertExactlyOnceAndBalanced(installedTargets(refused),
            ConnectIncrementalAssignorTest.configured(A1_B1));
        assertTrue(!installedTargets(refused).get(me).equals(AB), "the refused target moved nothing: " + refused);
        await("the refusal counted", () -> memberMetric("client-assignment-refused-total") == 1.0);
        // Many heartbeat intervals (50 ms) with no new signal: nothing applied, nothing installed again.
        await("heartbeats after the refusal", () -> heartbeatsBetween(refusedAt, Long.MAX_VALUE) >= 10);
        assertEquals(eventsBefore, listener.events.size(), "the herder was told something: " + listener.events);
        assertEquals(1, coordinator.installs.size(), "installed again without a signal");
        assertEquals(0.0, memberMetric("client-assignment-total"));
        for (Timed<HeartbeatRequest> r : coordinator.requests) {
            if (r.atMs() >= refusedAt && r.value().connectorsAndTasks() != null) {
                assertEquals(AB, Work.fromWire(r.value().connectorsAndTasks()), "owned set changed: " + r);
            }
        }
        // The next signal: the group as it is now (three members), installed; then the member's part.
        coordinator.onPrepare = r -> prepared(6, 1, Map.of(me, AB, "w2", Work.EMPTY, "w3", Work.EMPTY));
        coordinator.onInstall = r -> {
            coordinator.target = installedTargets(r).get(me);
            coordinator.epoch = r.groupEpoch();
            return new InstallAssignmentResponse(0, (short) 0, null);
        };
        long signalledAt = System.currentTimeMillis();
        coordinator.nextSignal = MemberLogic.COMPUTE_ASSIGNMENT;
        await("the second install", () -> coordinator.installs.size() == 2);
        InstallAssignmentRequest installed = coordinator.installs.get(1).value();
        assertEquals(6, installed.groupEpoch());
        Map<String, Work> target = installedTargets(installed);
        assertEquals(java.util.Set.of(me, "w2", "w3"), target.keySet());
        ConnectIncrementalAssignorTest.assertExactlyOnceAndBalanced(target,
            ConnectIncrementalAssignorTest.configured(A1_B1));
        Work mine = target.get(me);
        await("assigned its part at epoch 6", () -> listener.events.stream()
            .anyMatch(e -> e.value().equals("assigned 6 " + mine)));
        await("its part reported", () -> firstReportAfter(mine, signalledAt) >= 0);
        assertEquals(1.0, memberMetric("client-assignment-total"));
        assertEquals(1.0, memberMetric("client-assignment-refused-total"));
        List<String> after = listener.events.subList(eventsBefore, listener.events.size()).stream()
            .map(Timed::value).toList();
        assertEquals(List.of("revoked " + AB.minus(mine), "assigned 6 " + mine), after);
    }
}
