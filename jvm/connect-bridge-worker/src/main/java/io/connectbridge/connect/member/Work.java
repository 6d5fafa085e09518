package io.connectbridge.connect.member;

import io.connectbridge.connect.wire.ConnectGroupWire.ConnectorTasks;
import io.connectbridge.connect.wire.ConnectGroupWire.ConnectorsAndTasks;
import org.apache.kafka.connect.util.ConnectorTaskId;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.SortedSet;
import java.util.TreeMap;
import java.util.TreeSet;

/** Connector instances and tasks, as a value: what a worker owns, is assigned or must stop. */
public record Work(SortedSet<String> connectors, SortedSet<ConnectorTaskId> tasks) {
    public static final Work EMPTY = new Work(Collections.emptySortedSet(), Collections.emptySortedSet());

    public Work {
        connectors = Collections.unmodifiableSortedSet(new TreeSet<>(connectors));
        tasks = Collections.unmodifiableSortedSet(new TreeSet<>(tasks));
    }

    public static Work of(Collection<String> connectors, Collection<ConnectorTaskId> tasks) {
        return new Work(new TreeSet<>(connectors), new TreeSet<>(tasks));
    }

    public static Work fromWire(ConnectorsAndTasks wire) {
        if (wire == null) {
            return EMPTY;
        }
        TreeSet<ConnectorTaskId> tasks = new TreeSet<>();
        if (wire.tasks() != null) {
            for (ConnectorTasks t : wire.tasks()) {
                for (int id : t.taskIds()) {
                    tasks.add(new ConnectorTaskId(t.connector(), id));
                }
            }
        }
        return new Work(new TreeSet<>(wire.connectors() == null ? List.of() : wire.connectors()), tasks);
    }

    public ConnectorsAndTasks toWire() {
        Map<String, List<Integer>> byConnector = new TreeMap<>();
        for (ConnectorTaskId t : tasks) {
            byConnector.computeIfAbsent(t.connector(), c -> new ArrayList<>()).add(t.task());
        }
        List<ConnectorTasks> grouped = new ArrayList<>();
        byConnector.forEach((c, ids) -> grouped.add(new ConnectorTasks(c, ids)));
        return new ConnectorsAndTasks(new ArrayList<>(connectors), grouped);
    }

    public Work minus(Work other) {
        TreeSet<String> c = new TreeSet<>(connectors);
        c.removeAll(other.connectors);
        TreeSet<ConnectorTaskId> t = new TreeSet<>(tasks);
        t.removeAll(other.tasks);
        return new Work(c, t);
    }

    public Work plus(Work other) {
        TreeSet<String> c = new TreeSet<>(connectors);
        c.addAll(other.connectors);
        TreeSet<ConnectorTaskId> t = new TreeSet<>(tasks);
        t.addAll(other.tasks);
        return new Work(c, t);
    }

    public boolean isEmpty() {
        return connectors.isEmpty() && tasks.isEmpty();
    }

    public boolean contains(String connector) {
        return connectors.contains(connector);
    }

    public boolean contains(ConnectorTaskId task) {
        return tasks.contains(task);
    }

    /** Fresh mutable copies, for the herder (it mutates what it is given). */
    public List<String> connectorList() {
        return new ArrayList<>(connectors);
    }

    public List<ConnectorTaskId> taskList() {
        return new ArrayList<>(tasks);
    }

    @Override
    public String toString() {
        return "{connectors=" + connectors + ", tasks=" + tasks + "}";
    }
}
