package io.connectbridge.connect.member;

import io.connectbridge.connect.wire.ConnectGroupWire.Assignor;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentResponse;

import java.util.Map;

/**
 * A client-side assignor: when the coordinator chooses this member (COMPUTE_ASSIGNMENT), it turns
 * what PrepareAssignment shows into the group's next target, one {@link Work} per member.
 */
public interface ClientAssignor {
    /** What the member advertises in its heartbeats' ClientAssignors (constant for its life). */
    Assignor advertised();

    /**
     * Every member of {@code prepared} mapped to its whole target. Each configured connector and
     * task must appear exactly once: the coordinator refuses anything else (INVALID_ASSIGNMENT).
     *
     * @throws IllegalStateException when no such target could be computed
     */
    Map<String, Work> assign(PrepareAssignmentResponse prepared);
}
