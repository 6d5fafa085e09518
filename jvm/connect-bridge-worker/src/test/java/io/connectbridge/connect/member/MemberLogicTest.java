package io.connectbridge.connect.member;

import io.connectbridge.connect.member.MemberLogic.Reaction;
import io.connectbridge.connect.wire.ConnectGroupWire.Assignment;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;
import org.apache.kafka.connect.util.ConnectorTaskId;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The cases of the Python reference member (workers/new_protocol.py), on the Java logic. */
class MemberLogicTest {
    static final Work AB = Work.of(List.of("a"), List.of(new ConnectorTaskId("a", 0), new ConnectorTaskId("b", 1)));
    static final Work A = Work.of(List.of("a"), List.of(new ConnectorTaskId("a", 0)));

    static MemberLogic logic(String instanceId) {
        return new MemberLogic(new MemberLogic.Settings("g", "m-1", instanceId, "http://w1/", 60000, 10000, 3000,
            null, null));
    }

    static HeartbeatResponse answer(int epoch, Work work) {
        Assignment a = work == null ? null
            : new Assignment((byte) 0, work.toWire(), "m-1", "http://w1/", 7L, (short) 0, new byte[0]);
        return new HeartbeatResponse(0, (short) 0, null, null, epoch, 2000, a);
    }

    static HeartbeatResponse error(short code) {
        return new HeartbeatResponse(0, code, "x", null, 0, 0, null);
    }

    /** Joined at {@code epoch} owning {@code work}, the herder having been handed it. */
    static MemberLogic joined(int epoch, Work work) {
        MemberLogic m = logic(null);
        m.heartbeatRequest(0, 5);
        Reaction r = m.onResponse(answer(epoch, work));
        m.assignmentDelivered(r.assign);
        return m;
    }

    @Test
    void joinIsFullWithTheClientChosenIdAndLaterBeatsOnlyCarryChanges() {
        MemberLogic m = logic("i-1");
        HeartbeatRequest join = m.heartbeatRequest(0, 5);
        assertEquals("m-1", join.memberId());
        assertEquals(0, join.memberEpoch());
        assertEquals(60000, join.rebalanceTimeoutMs());
        assertEquals("http://w1/", join.workerUrl());
        assertEquals(5, join.configOffset());
        assertEquals("i-1", join.instanceId());
        assertNotNull(join.connectorsAndTasks());
        Reaction r = m.onResponse(answer(3, AB));
        assertTrue(r.epochChanged);
        assertEquals(2000, r.intervalMs);
        assertEquals(AB, r.assign.work());
        m.assignmentDelivered(r.assign);
        HeartbeatRequest beat = m.heartbeatRequest(1000, 5);
        assertEquals(3, beat.memberEpoch());
        assertEquals(-1, beat.rebalanceTimeoutMs());
        assertNull(beat.workerUrl());
        assertEquals(-1, beat.configOffset());
        assertEquals(AB, Work.fromWire(beat.connectorsAndTasks()), "owned changed since the join: reported");
        m.onResponse(answer(3, null));
        assertNull(m.heartbeatRequest(2000, 6).connectorsAndTasks());
    }

    @Test
    void revokedWorkIsStoppedBeforeTheSmallerSetIsReported() {
        MemberLogic m = joined(3, AB);
        m.heartbeatRequest(1000, 5);
        m.onResponse(answer(3, null));
        m.heartbeatRequest(2000, 5);
        Reaction r = m.onResponse(answer(4, A));
        assertEquals(AB.minus(A), r.revoke);
        assertEquals(A, r.assign.work());
        // Until the herder has stopped it, the member still owns the revoked work.
        HeartbeatRequest before = m.heartbeatRequest(2100, 5);
        assertNull(before.connectorsAndTasks());
        m.onResponse(answer(4, null));
        m.revocationDone(r.revoke);
        m.assignmentDelivered(r.assign);
        HeartbeatRequest ack = m.heartbeatRequest(2200, 5);
        assertEquals(A, Work.fromWire(ack.connectorsAndTasks()));
    }

    @Test
    void fencedOrUnknownGivesEverythingUpThenRejoinsAtEpochZeroWithTheSameId() {
        for (short code : new short[] {MemberLogic.FENCED_MEMBER_EPOCH, MemberLogic.UNKNOWN_MEMBER_ID}) {
            MemberLogic m = joined(3, AB);
            m.heartbeatRequest(1000, 5);
            Reaction r = m.onResponse(error(code));
            assertTrue(r.revokeAll);
            assertTrue(m.resetPending());
            assertThrows(IllegalStateException.class, () -> m.heartbeatRequest(1100, 5),
                "no heartbeat before the herder stopped everything");
            m.resetDone();
            HeartbeatRequest rejoin = m.heartbeatRequest(1200, 5);
            assertEquals(0, rejoin.memberEpoch());
            assertEquals("m-1", rejoin.memberId());
            assertEquals(Work.EMPTY, Work.fromWire(rejoin.connectorsAndTasks()));
        }
    }

    @Test
    void anAssignmentAnsweredBeforeAFenceIsVoid() {
        MemberLogic m = joined(3, AB);
        m.heartbeatRequest(1000, 5);
        m.onResponse(error(MemberLogic.FENCED_MEMBER_EPOCH));
        m.assignmentDelivered(new MemberLogic.Assignment((byte) 0, A, "x", "u", 1, 3));
        m.resetDone();
        assertEquals(Work.EMPTY, m.owned());
    }

    @Test
    void sessionRunsFromTheSendTimeOfTheLastAnsweredHeartbeat() {
        MemberLogic m = logic(null);
        m.heartbeatRequest(1000, 5);
        m.onResponse(answer(1, AB));
        assertEquals(11000L, m.sessionExpiryMs());
        assertNull(m.expireSession(10999));
        m.heartbeatRequest(4000, 5); // never answered
        m.onTransportFailure();
        Reaction r = m.expireSession(11000);
        assertNotNull(r);
        assertTrue(r.revokeAll);
        assertEquals(0, m.memberEpoch());
    }

    @Test
    void aDuplicateAnswerIsStale() {
        MemberLogic m = joined(3, AB);
        Reaction r = m.onResponse(answer(9, A));
        assertTrue(r.stale);
        assertEquals(3, m.memberEpoch());
    }

    @Test
    void errorsMakeTheNextHeartbeatFullAndMovedCoordinatorsAreLookedUpAgain() {
        MemberLogic m = joined(3, AB);
        m.heartbeatRequest(1000, 5);
        Reaction r = m.onResponse(error(MemberLogic.NOT_COORDINATOR));
        assertTrue(r.rediscover);
        assertFalse(r.revokeAll);
        HeartbeatRequest full = m.heartbeatRequest(2000, 5);
        assertEquals(3, full.memberEpoch());
        assertEquals(60000, full.rebalanceTimeoutMs());
        assertEquals(AB, Work.fromWire(full.connectorsAndTasks()));
        m.onTransportFailure();
        assertEquals(60000, m.heartbeatRequest(3000, 5).rebalanceTimeoutMs());
    }

    @Test
    void leavingIsEpochMinusOneOrMinusTwoForAStaticMember() {
        assertEquals(-1, logic(null).leaveRequest().memberEpoch());
        HeartbeatRequest leave = logic("i-1").leaveRequest();
        assertEquals(-2, leave.memberEpoch());
        assertEquals("i-1", leave.instanceId());
    }

    @Test
    void fencedInstanceIdIsFatal() {
        MemberLogic m = joined(3, AB);
        m.heartbeatRequest(1000, 5);
        Reaction r = m.onResponse(error(MemberLogic.FENCED_INSTANCE_ID));
        assertNotNull(r.fatal);
        assertTrue(r.revokeAll);
    }

    @Test
    void aChangedConfigOffsetIsReported() {
        MemberLogic m = joined(3, AB);
        assertEquals(-1, m.heartbeatRequest(1000, 5).configOffset());
        m.onResponse(answer(3, null));
        assertEquals(9, m.heartbeatRequest(2000, 9).configOffset());
    }

    @Test
    void computeAssignmentIsASignalNotAFailure() {
        MemberLogic m = logic(null);
        m.heartbeatRequest(0, 5);
        HeartbeatResponse resp = new HeartbeatResponse(0, MemberLogic.COMPUTE_ASSIGNMENT, null, null, 2, 3000,
            answer(2, A).assignment());
        Reaction r = m.onResponse(resp);
        assertTrue(r.computeAssignment);
        assertEquals(Set.copyOf(A.tasks()), Set.copyOf(r.assign.work().tasks()));
        assertEquals(2, m.memberEpoch());
    }

    @Test
    void theSameAssignmentAgainIsNotHandedToTheHerderAgain() {
        MemberLogic m = joined(3, AB);
        m.requestFull();
        m.heartbeatRequest(1000, 5);
        Reaction again = m.onResponse(answer(3, AB));
        assertNull(again.assign, "a full heartbeat's answer repeating the assignment");
        m.heartbeatRequest(2000, 5);
        Reaction changed = m.onResponse(answer(4, AB));
        assertNotNull(changed.assign, "a new epoch is news");
    }
}
