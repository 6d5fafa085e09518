package org.apache.kafka.connect.runtime.distributed;

import io.connectbridge.connect.member.Work;
import io.connectbridge.connect.wire.ConnectGroupWire.ConfiguredConnector;
import io.connectbridge.connect.wire.ConnectGroupWire.MemberAssignor;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareMember;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.util.ConnectorTaskId;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Client-side assignment through Connect's own IncrementalCooperativeAssignor. */
class ConnectIncrementalAssignorTest {
    static final List<ConfiguredConnector> CONNECTORS = List.of(new ConfiguredConnector("a", 6),
        new ConfiguredConnector("b", 4), new ConfiguredConnector("c", 2));

    static ConnectIncrementalAssignor assignor() {
        return new ConnectIncrementalAssignor(new LogContext(), Time.SYSTEM, (short) 2);
    }

    static PrepareAssignmentResponse prepare(int groupEpoch, int assignmentEpoch, List<ConfiguredConnector> connectors,
                                             Map<String, Work> members) {
        List<PrepareMember> prepared = new ArrayList<>();
        members.forEach((id, work) -> prepared.add(new PrepareMember(id, 1, null, "http://" + id + "/", 5,
            new MemberAssignor((short) 2, (byte) 0, new byte[0]), work.toWire())));
        return new PrepareAssignmentResponse(0, (short) 0, null, groupEpoch, assignmentEpoch,
            ConnectIncrementalAssignor.NAME, 5, connectors, prepared);
    }

    static Work configured(List<ConfiguredConnector> connectors) {
        List<String> names = new ArrayList<>();
        List<ConnectorTaskId> tasks = new ArrayList<>();
        for (ConfiguredConnector c : connectors) {
            names.add(c.name());
            for (int i = 0; i < c.taskCount(); i++) {
                tasks.add(new ConnectorTaskId(c.name(), i));
            }
        }
        return Work.of(names, tasks);
    }

    /** Every configured item exactly once, connectors and tasks each balanced within one. */
    static void assertExactlyOnceAndBalanced(Map<String, Work> target, Work configured) {
        Set<String> connectors = new HashSet<>();
        Set<ConnectorTaskId> tasks = new HashSet<>();
        for (Work w : target.values()) {
            for (String c : w.connectors()) {
                assertTrue(connectors.add(c), c + " assigned twice: " + target);
            }
            for (ConnectorTaskId t : w.tasks()) {
                assertTrue(tasks.add(t), t + " assigned twice: " + target);
            }
        }
        assertEquals(configured.connectors(), new java.util.TreeSet<>(connectors), "connectors: " + target);
        assertEquals(configured.tasks(), new java.util.TreeSet<>(tasks), "tasks: " + target);
        int minC = target.values().stream().mapToInt(w -> w.connectors().size()).min().orElse(0);
        int maxC = target.values().stream().mapToInt(w -> w.connectors().size()).max().orElse(0);
        int minT = target.values().stream().mapToInt(w -> w.tasks().size()).min().orElse(0);
        int maxT = target.values().stream().mapToInt(w -> w.tasks().size()).max().orElse(0);
        assertTrue(maxC - minC <= 1, "connectors unbalanced: " + target);
        assertTrue(maxT - minT <= 1, "tasks unbalanced: " + target);
    }

    @Test
    void aFreshGroupGetsEveryItemExactlyOnceBalanced() {
        Map<String, Work> members = new LinkedHashMap<>();
        for (String id : List.of("m1", "m2", "m3")) {
            members.put(id, Work.EMPTY);
        }
        Map<String, Work> target = assignor().assign(prepare(1, 0, CONNECTORS, members));
        assertEquals(members.keySet(), target.keySet());
        assertExactlyOnceAndBalanced(target, configured(CONNECTORS));
    }

    @Test
    void aJoiningMemberGetsItsShareAndNothingElseMoves() {
        ConnectIncrementalAssignor assignor = assignor();
        Map<String, Work> two = new LinkedHashMap<>();
        two.put("m1", Work.EMPTY);
        two.put("m2", Work.EMPTY);
        Map<String, Work> first = assignor.assign(prepare(1, 0, CONNECTORS, two));
        assertExactlyOnceAndBalanced(first, configured(CONNECTORS));

        Map<String, Work> three = new LinkedHashMap<>(first);
        three.put("m3", Work.EMPTY);
        Map<String, Work> second = assignor.assign(prepare(2, 1, CONNECTORS, three));
        assertExactlyOnceAndBalanced(second, configured(CONNECTORS));
        for (String id : List.of("m1", "m2")) {
            assertTrue(first.get(id).tasks().containsAll(second.get(id).tasks()),
                id + " kept only its own tasks (sticky): " + first + " -> " + second);
            assertTrue(first.get(id).connectors().containsAll(second.get(id).connectors()),
                id + " kept only its own connectors (sticky): " + first + " -> " + second);
        }
        assertTrue(second.get("m3").tasks().size() >= 3, "the new member got its share: " + second);
    }

    @Test
    void aStableGroupIsLeftAlone() {
        ConnectIncrementalAssignor assignor = assignor();
        Map<String, Work> members = new LinkedHashMap<>();
        members.put("m1", Work.EMPTY);
        members.put("m2", Work.EMPTY);
        Map<String, Work> first = assignor.assign(prepare(1, 0, CONNECTORS, members));
        Map<String, Work> again = assignor.assign(prepare(2, 1, CONNECTORS, first));
        assertEquals(first, again);
        // A fresh assignor (another member chosen) keeps it too.
        assertEquals(first, assignor().assign(prepare(3, 2, CONNECTORS, first)));
    }

    @Test
    void aDepartedMembersWorkAndNewAndDeletedConnectorsAreHandled() {
        ConnectIncrementalAssignor assignor = assignor();
        Map<String, Work> members = new LinkedHashMap<>();
        for (String id : List.of("m1", "m2", "m3")) {
            members.put(id, Work.EMPTY);
        }
        Map<String, Work> first = assignor.assign(prepare(1, 0, CONNECTORS, members));
        // m3 is gone and its work no longer held; connector c deleted, d created.
        List<ConfiguredConnector> changed = List.of(new ConfiguredConnector("a", 6),
            new ConfiguredConnector("b", 4), new ConfiguredConnector("d", 3));
        Map<String, Work> left = new LinkedHashMap<>();
        left.put("m1", first.get("m1"));
        left.put("m2", first.get("m2"));
        Map<String, Work> second = assignor.assign(prepare(2, 1, changed, left));
        assertExactlyOnceAndBalanced(second, configured(changed));
    }

    /**
     * A target this member computed and the coordinator refused (INVALID_ASSIGNMENT) stays in the
     * assignor's memory as its previous assignment. Another member installed the group's target at
     * the same group epoch meanwhile, so the next PrepareAssignment's assignment epoch matches the
     * refused target's and Connect's assignor does not clear that memory: the next computation must
     * still start from what the group runs (a stable group left alone, a joining member given its share).
     */
    @Test
    void aRefusedTargetDoesNotSteerTheNextComputation() {
        ConnectIncrementalAssignor mine = assignor();
        Map<String, Work> two = new LinkedHashMap<>();
        two.put("m1", Work.EMPTY);
        two.put("m2", Work.EMPTY);
        Map<String, Work> installed1 = assignor().assign(prepare(1, 0, CONNECTORS, two));
        Map<String, Work> withM3 = new LinkedHashMap<>(installed1);
        withM3.put("m3", Work.EMPTY);
        Map<String, Work> refused = mine.assign(prepare(5, 1, CONNECTORS, withM3));
        assertExactlyOnceAndBalanced(refused, configured(CONNECTORS));
        // Another member installed epoch 5 for the group as it was by then: m3 gone, m4 there.
        Map<String, Work> withM4 = new LinkedHashMap<>(installed1);
        withM4.put("m4", Work.EMPTY);
        Map<String, Work> installed5 = assignor().assign(prepare(5, 1, CONNECTORS, withM4));
        assertExactlyOnceAndBalanced(installed5, configured(CONNECTORS));
        assertEquals(installed5, mine.assign(prepare(6, 5, CONNECTORS, installed5)), "a stable group moved");
        Map<String, Work> withM5 = new LinkedHashMap<>(installed5);
        withM5.put("m5", Work.EMPTY);
        Map<String, Work> next = mine.assign(prepare(7, 6, CONNECTORS, withM5));
        assertExactlyOnceAndBalanced(next, configured(CONNECTORS));
        for (String id : List.of("m1", "m2", "m4")) {
            assertTrue(installed5.get(id).tasks().containsAll(next.get(id).tasks()),
                id + " was given work it did not run: " + installed5 + " -> " + next);
        }
    }
}
