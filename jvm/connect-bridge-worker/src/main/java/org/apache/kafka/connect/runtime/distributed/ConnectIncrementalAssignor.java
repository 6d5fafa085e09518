package org.apache.kafka.connect.runtime.distributed;

import io.connectbridge.connect.member.ClientAssignor;
import io.connectbridge.connect.member.Work;
import io.connectbridge.connect.wire.ConnectGroupWire.Assignor;
import io.connectbridge.connect.wire.ConnectGroupWire.ConfiguredConnector;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareMember;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.runtime.TargetState;
import org.apache.kafka.connect.runtime.distributed.IncrementalCooperativeAssignor.ClusterAssignment;
import org.apache.kafka.connect.runtime.distributed.WorkerCoordinator.ConnectorsAndTasks;
import org.apache.kafka.connect.storage.ClusterConfigState;
import org.apache.kafka.connect.util.ConnectorTaskId;
import org.slf4j.Logger;

import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Client-side assignment with Connect's own {@link IncrementalCooperativeAssignor}, through its
 * package-private {@code performTaskAssignment(ClusterConfigState, int, int, Map)} (hence this
 * package).
 *
 * <p>The coordinator's target is declarative (what each member should run) and the coordinator
 * itself revokes before it grants. Connect's assignor is incremental: in a round where it revokes
 * work for balance, or finds work lost, that work is in nobody's assignment until a later round.
 * So the assignor runs again on its own result, as if the members had acknowledged, until every
 * configured item has an owner (at most {@link #MAX_ROUNDS} rounds). Its scheduled delay is 0:
 * the bridge holds a departed member's work itself and hides it from PrepareAssignment, so the
 * assignor must not hold anything back.
 *
 * <p>One instance per member keeps the assignor's memory of the previous assignment while the
 * member keeps the job; the assignor clears it by itself when the epochs do not follow on.
 */
public final class ConnectIncrementalAssignor implements ClientAssignor {
    /** The name advertised in ClientAssignors. */
    public static final String NAME = "connect-incremental";
    /** Connect protocol versions this assignor serves: compatible (1) and sessioned (2). */
    public static final short MIN_VERSION = 1;
    public static final short MAX_VERSION = 2;
    static final int MAX_ROUNDS = 4;

    private final IncrementalCooperativeAssignor assignor;
    private final short protocolVersion;
    private final Logger log;

    public ConnectIncrementalAssignor(LogContext logContext, Time time, short protocolVersion) {
        this.assignor = new IncrementalCooperativeAssignor(logContext, time, 0);
        this.protocolVersion = protocolVersion;
        this.log = logContext.logger(ConnectIncrementalAssignor.class);
    }

    @Override
    public Assignor advertised() {
        return new Assignor(NAME, MIN_VERSION, MAX_VERSION, (byte) 0, protocolVersion, new byte[0]);
    }

    @Override
    public Map<String, Work> assign(PrepareAssignmentResponse prepared) {
        ClusterConfigState snapshot = snapshot(prepared);
        Work configured = configured(prepared);
        Map<String, ConnectorsAndTasks> members = new TreeMap<>();
        for (PrepareMember m : prepared.members()) {
            // Only configured work counts: anything else in a current target is being deleted.
            Work current = Work.fromWire(m.connectorsAndTasks());
            members.put(m.memberId(), toConnect(current.minus(current.minus(configured))));
        }
        int lastCompleted = prepared.assignmentEpoch();
        for (int round = 1; round <= MAX_ROUNDS; round++) {
            ClusterAssignment result = assignor.performTaskAssignment(snapshot, lastCompleted,
                prepared.groupEpoch(), members);
            Map<String, Work> target = fromConnect(members.keySet(), result);
            Work missing = configured;
            for (Work w : target.values()) {
                missing = missing.minus(w);
            }
            if (missing.isEmpty()) {
                log.debug("Connect's assignor gave every configured item an owner in round {}", round);
                return target;
            }
            log.debug("Round {} of Connect's assignor left {} without an owner (revoked for balance or lost): "
                + "running it again on its own result", round, missing);
            members = new TreeMap<>();
            for (Map.Entry<String, Work> e : target.entrySet()) {
                members.put(e.getKey(), toConnect(e.getValue()));
            }
            lastCompleted = prepared.groupEpoch();
        }
        throw new IllegalStateException("Connect's assignor left work without an owner after " + MAX_ROUNDS
            + " rounds");
    }

    private static ClusterConfigState snapshot(PrepareAssignmentResponse p) {
        Map<String, Integer> taskCounts = new HashMap<>();
        Map<String, Map<String, String>> configs = new HashMap<>();
        Map<String, TargetState> states = new HashMap<>();
        Map<ConnectorTaskId, Map<String, String>> taskConfigs = new HashMap<>();
        for (ConfiguredConnector c : p.connectors()) {
            taskCounts.put(c.name(), c.taskCount());
            configs.put(c.name(), Map.of());
            states.put(c.name(), TargetState.STARTED);
            for (int i = 0; i < c.taskCount(); i++) {
                taskConfigs.put(new ConnectorTaskId(c.name(), i), Map.of());
            }
        }
        return new ClusterConfigState(p.configOffset(), null, taskCounts, configs, states, taskConfigs, Map.of(),
            Map.of(), Map.of(), Set.of(), Set.of());
    }

    private static Work configured(PrepareAssignmentResponse p) {
        TreeSet<String> connectors = new TreeSet<>();
        TreeSet<ConnectorTaskId> tasks = new TreeSet<>();
        for (ConfiguredConnector c : p.connectors()) {
            connectors.add(c.name());
            for (int i = 0; i < c.taskCount(); i++) {
                tasks.add(new ConnectorTaskId(c.name(), i));
            }
        }
        return new Work(connectors, tasks);
    }

    private static ConnectorsAndTasks toConnect(Work w) {
        return new ConnectorsAndTasks.Builder().with(w.connectorList(), w.taskList()).build();
    }

    private static Map<String, Work> fromConnect(Collection<String> memberIds, ClusterAssignment result) {
        Map<String, Work> out = new TreeMap<>();
        for (String id : memberIds) {
            Collection<String> connectors = result.allAssignedConnectors().getOrDefault(id, List.of());
            Collection<ConnectorTaskId> tasks = result.allAssignedTasks().getOrDefault(id, List.of());
            out.put(id, Work.of(connectors, tasks));
        }
        return out;
    }
}
