package io.connectbridge.connect;

import org.apache.kafka.common.config.ConfigException;

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

/**
 * The worker settings that choose and shape the group membership, taken out of the worker's
 * properties before Connect sees them.
 *
 * <p>Stock Connect 4.3.1 copies the worker properties into the consumers of its internal topics, and
 * {@code ConsumerConfig} refuses {@code group.protocol=connect} (and {@code group.remote.assignor} with
 * the classic protocol). So with {@code group.protocol=connect} these keys leave the map here:
 * {@code group.protocol}, {@code group.instance.id}, {@code group.remote.assignor} and every
 * {@code connect.bridge.*} key ({@code connect.bridge.assignment}: {@code server}, the default, or
 * {@code client}). With {@code group.protocol} unset or {@code classic} the map is
 * left exactly as it is and the worker is stock Connect.
 */
public record BridgeMemberSettings(GroupProtocol protocol, String instanceId, String serverAssignor,
                                   boolean clientAssignment) {
    public static final String GROUP_PROTOCOL = "group.protocol";
    public static final String GROUP_INSTANCE_ID = "group.instance.id";
    public static final String GROUP_REMOTE_ASSIGNOR = "group.remote.assignor";
    public static final String BRIDGE_PREFIX = "connect.bridge.";
    public static final String ASSIGNMENT = BRIDGE_PREFIX + "assignment";

    public enum GroupProtocol { CLASSIC, CONNECT }

    /** The settings and the worker properties Connect itself may see. */
    public record Split(BridgeMemberSettings settings, Map<String, String> workerProps) {
    }

    public static Split split(Map<String, String> props) {
        String protocol = props.get(GROUP_PROTOCOL);
        if (protocol == null || protocol.trim().equalsIgnoreCase("classic")) {
            return new Split(new BridgeMemberSettings(GroupProtocol.CLASSIC, null, null, false), props);
        }
        if (!protocol.trim().equalsIgnoreCase("connect")) {
            throw new ConfigException(GROUP_PROTOCOL, protocol, "must be classic or connect");
        }
        Map<String, String> rest = new HashMap<>(props);
        rest.remove(GROUP_PROTOCOL);
        String instanceId = blankToNull(rest.remove(GROUP_INSTANCE_ID));
        String serverAssignor = blankToNull(rest.remove(GROUP_REMOTE_ASSIGNOR));
        String assignment = blankToNull(rest.get(ASSIGNMENT));
        rest.keySet().removeIf(k -> k.startsWith(BRIDGE_PREFIX));
        boolean clientAssignment = false;
        if (assignment != null) {
            switch (assignment.toLowerCase(Locale.ROOT)) {
                case "server" -> clientAssignment = false;
                case "client" -> clientAssignment = true;
                default -> throw new ConfigException(ASSIGNMENT, assignment,
                    "must be server (the coordinator's assignor computes the assignment) or client (this worker "
                        + "advertises Connect's IncrementalCooperativeAssignor and computes it when the coordinator "
                        + "asks)");
            }
        }
        String connectProtocol = rest.getOrDefault("connect.protocol", "sessioned").trim().toLowerCase(Locale.ROOT);
        if (connectProtocol.equals("eager")) {
            throw new ConfigException("connect.protocol", "eager",
                "group.protocol=connect needs connect.protocol=compatible or sessioned (eager stops all work on "
                    + "every rebalance)");
        }
        String eos = rest.getOrDefault("exactly.once.source.support", "disabled").trim().toLowerCase(Locale.ROOT);
        if (!eos.equals("disabled")) {
            throw new ConfigException("exactly.once.source.support", eos,
                "group.protocol=connect does not support exactly-once source support yet (its zombie fencing is "
                    + "leader-driven and untested on the new protocol): use group.protocol=classic on this worker");
        }
        return new Split(new BridgeMemberSettings(GroupProtocol.CONNECT, instanceId, serverAssignor, clientAssignment),
            rest);
    }

    private static String blankToNull(String s) {
        return s == null || s.isBlank() ? null : s.trim();
    }
}
