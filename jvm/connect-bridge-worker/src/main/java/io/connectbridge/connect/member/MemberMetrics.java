package io.connectbridge.connect.member;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Avg;
import org.apache.kafka.common.metrics.stats.CumulativeCount;
import org.apache.kafka.common.metrics.stats.Max;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;

/**
 * What an operator watches on a new-protocol member, in the worker's own {@link Metrics} (so JMX
 * {@code kafka.connect:type=connect-bridge-member-metrics,client-id=...}): member epoch, assigned
 * connectors and tasks, rebalances (assignments delivered), time spent revoking, and how often the
 * member gave everything up (fenced, session lost).
 */
public final class MemberMetrics implements AutoCloseable {
    public static final String GROUP = "connect-bridge-member-metrics";

    /** A consistent reading of the member's state. */
    public record View(int memberEpoch, int assignedConnectors, int assignedTasks) {
    }

    private final Metrics metrics;
    private final List<MetricName> gauges = new ArrayList<>();
    private final Sensor rebalances;
    private final Sensor revocations;
    private final Sensor fenced;
    private final Sensor clientAssignments;
    private final Sensor clientAssignmentsRefused;

    public MemberMetrics(Metrics metrics, Supplier<View> view) {
        this.metrics = metrics;
        gauge("member-epoch", "The member epoch of this worker in its Connect group.", () -> view.get().memberEpoch());
        gauge("assigned-connectors", "The connectors assigned to this worker.", () -> view.get().assignedConnectors());
        gauge("assigned-tasks", "The tasks assigned to this worker.", () -> view.get().assignedTasks());
        rebalances = metrics.sensor("connect-bridge-member-rebalances");
        rebalances.add(metrics.metricName("rebalance-total", GROUP, "Assignments handed to the herder."),
            new CumulativeCount());
        revocations = metrics.sensor("connect-bridge-member-revocations");
        revocations.add(metrics.metricName("revoke-time-avg", GROUP,
            "Average time (ms) the worker took to stop revoked work."), new Avg());
        revocations.add(metrics.metricName("revoke-time-max", GROUP,
            "Longest time (ms) the worker took to stop revoked work."), new Max());
        revocations.add(metrics.metricName("revoke-total", GROUP, "Revocations."), new CumulativeCount());
        fenced = metrics.sensor("connect-bridge-member-fenced");
        fenced.add(metrics.metricName("fenced-total", GROUP,
            "Times the worker gave all its work up (fenced, unknown member, session lost, poll timeout)."),
            new CumulativeCount());
        clientAssignments = metrics.sensor("connect-bridge-member-client-assignments");
        clientAssignments.add(metrics.metricName("client-assignment-total", GROUP,
            "Group targets this worker computed and installed (client-side assignment)."), new CumulativeCount());
        clientAssignmentsRefused = metrics.sensor("connect-bridge-member-client-assignments-refused");
        clientAssignmentsRefused.add(metrics.metricName("client-assignment-refused-total", GROUP,
            "Group targets this worker computed that the coordinator refused (INVALID_ASSIGNMENT: the group "
                + "moved on); none of them was applied."), new CumulativeCount());
    }

    private void gauge(String name, String doc, Supplier<Integer> value) {
        MetricName metricName = metrics.metricName(name, GROUP, doc);
        metrics.addMetric(metricName, (Gauge<Integer>) (config, now) -> value.get());
        gauges.add(metricName);
    }

    public void recordRebalance() {
        rebalances.record();
    }

    public void recordRevocation(long ms) {
        revocations.record(ms);
    }

    public void recordFenced() {
        fenced.record();
    }

    public void recordClientAssignment() {
        clientAssignments.record();
    }

    public void recordClientAssignmentRefused() {
        clientAssignmentsRefused.record();
    }

    @Override
    public void close() {
        gauges.forEach(metrics::removeMetric);
        metrics.removeSensor(rebalances.name());
        metrics.removeSensor(revocations.name());
        metrics.removeSensor(fenced.name());
        metrics.removeSensor(clientAssignments.name());
        metrics.removeSensor(clientAssignmentsRefused.name());
    }
}
