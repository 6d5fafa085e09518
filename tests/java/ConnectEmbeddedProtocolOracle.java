// Apache Kafka's own Connect runtime answers what the Connect embedded protocol's bytes are.
//
// Run by tests/connect_vectors.py with Java's source launcher on Kafka's classpath:
//   java -cp '<kafka libs>/*' tests/java/ConnectEmbeddedProtocolOracle.java < requests.json
// stdin is a JSON array of requests, stdout a JSON array of answers in the same order:
//   {"op": "encode", "kind": "subscription"|"assignment", "version": V, "input": {...}}
//     -> {"hex": ...}: what Kafka's writer for version V writes (0: ConnectProtocol, 1 and 2:
//        IncrementalCooperativeConnectProtocol, 2 being "sessioned"), or {"error": ...}.
//   {"op": "decode", "kind": ..., "hex": ...}
//     -> {"decoded": ..., "reencoded_hex": ..., "eager": ...} or {"error": ..., "eager": ...}: what
//        the reader the runtime uses (IncrementalCooperativeConnectProtocol, for every version)
//        returns, what Kafka's writer makes of that object again at the same version (versions 0-2
//        only), and what the v0-only reader (ConnectProtocol) makes of the same bytes.
// The input and decoded shapes are the ones tests/data/connect-embedded-protocol.json documents.
// Only Kafka's public classes are called; nothing of Kafka's code is copied here.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.apache.kafka.connect.runtime.distributed.ConnectProtocol;
import org.apache.kafka.connect.runtime.distributed.ExtendedAssignment;
import org.apache.kafka.connect.runtime.distributed.ExtendedWorkerState;
import org.apache.kafka.connect.runtime.distributed.IncrementalCooperativeConnectProtocol;
import org.apache.kafka.connect.util.ConnectorTaskId;

public class ConnectEmbeddedProtocolOracle {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) throws Exception {
        JsonNode requests = JSON.readTree(System.in);
        ArrayNode answers = JSON.createArrayNode();
        for (JsonNode request : requests) {
            answers.add(answer(request));
        }
        System.out.println(JSON.writeValueAsString(answers));
    }

    private static ObjectNode answer(JsonNode request) {
        ObjectNode out = JSON.createObjectNode();
        String kind = request.get("kind").asText();
        boolean subscription = kind.equals("subscription");
        if (!subscription && !kind.equals("assignment")) {
            throw new IllegalArgumentException("unknown kind " + kind);
        }
        String op = request.get("op").asText();
        if (op.equals("encode")) {
            short version = (short) request.get("version").asInt();
            try {
                ByteBuffer bytes = subscription
                    ? writeSubscription(subscriptionOf(request.get("input"), version), version)
                    : writeAssignment(assignmentOf(request.get("input"), version), version);
                out.put("hex", hex(bytes));
            } catch (RuntimeException e) {
                out.put("error", describe(e));
            }
        } else if (op.equals("decode")) {
            byte[] bytes = HEX.parseHex(request.get("hex").asText());
            try {
                if (subscription) {
                    ExtendedWorkerState state =
                        IncrementalCooperativeConnectProtocol.deserializeMetadata(ByteBuffer.wrap(bytes));
                    short version = ByteBuffer.wrap(bytes).getShort();
                    out.set("decoded", subscriptionJson(state, version));
                    if (version >= 0 && version <= 2) {
                        out.put("reencoded_hex", hex(writeSubscription(state, version)));
                    }
                } else {
                    ExtendedAssignment assignment =
                        IncrementalCooperativeConnectProtocol.deserializeAssignment(ByteBuffer.wrap(bytes));
                    out.set("decoded", assignmentJson(assignment));
                    if (assignment.version() >= 0 && assignment.version() <= 2) {
                        out.put("reencoded_hex", hex(writeAssignment(assignment, assignment.version())));
                    }
                }
            } catch (RuntimeException e) {
                out.put("error", describe(e));
            }
            out.put("eager", eager(bytes, subscription));
        } else {
            throw new IllegalArgumentException("unknown op " + op);
        }
        return out;
    }

    /** What the v0-only reader makes of the bytes, as one line. */
    private static String eager(byte[] bytes, boolean subscription) {
        try {
            if (subscription) {
                ConnectProtocol.WorkerState state = ConnectProtocol.deserializeMetadata(ByteBuffer.wrap(bytes));
                return "ok url=" + state.url() + " offset=" + state.offset();
            }
            ConnectProtocol.Assignment assignment = ConnectProtocol.deserializeAssignment(ByteBuffer.wrap(bytes));
            return "ok connectors=" + assignment.connectors() + " tasks=" + assignment.tasks();
        } catch (RuntimeException e) {
            return "error: " + describe(e);
        }
    }

    private static String describe(RuntimeException e) {
        return e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    private static ByteBuffer writeSubscription(ExtendedWorkerState state, short version) {
        if (version == 0) {
            return ConnectProtocol.serializeMetadata(state);
        }
        return IncrementalCooperativeConnectProtocol.serializeMetadata(state, version >= 2);
    }

    private static ByteBuffer writeAssignment(ExtendedAssignment assignment, short version) {
        if (version == 0) {
            return ConnectProtocol.serializeAssignment(assignment);
        }
        return IncrementalCooperativeConnectProtocol.serializeAssignment(assignment, version >= 2);
    }

    private static ExtendedWorkerState subscriptionOf(JsonNode input, short version) {
        JsonNode allocation = input.get("allocation");
        return new ExtendedWorkerState(
            input.get("url").asText(),
            input.get("config_offset").asLong(),
            allocation == null || allocation.isNull() ? null : assignmentOf(allocation, version));
    }

    /** Groups of ``{"connector", "tasks"}`` (task -1: the connector itself) as Kafka's two lists. */
    private static ExtendedAssignment assignmentOf(JsonNode input, short version) {
        List<String> connectors = new ArrayList<>();
        List<ConnectorTaskId> tasks = new ArrayList<>();
        split(input.get("assignment"), connectors, tasks);
        List<String> revokedConnectors = new ArrayList<>();
        List<ConnectorTaskId> revokedTasks = new ArrayList<>();
        split(input.get("revoked"), revokedConnectors, revokedTasks);
        JsonNode delay = input.get("delay");
        return new ExtendedAssignment(
            version,
            (short) input.get("error").asInt(),
            input.get("leader").asText(),
            input.get("leader_url").asText(),
            input.get("config_offset").asLong(),
            connectors,
            tasks,
            revokedConnectors,
            revokedTasks,
            delay == null ? 0 : delay.asInt());
    }

    private static void split(JsonNode groups, List<String> connectors, List<ConnectorTaskId> tasks) {
        if (groups == null || groups.isNull()) {
            return;
        }
        for (JsonNode group : groups) {
            String connector = group.get("connector").asText();
            for (JsonNode task : group.get("tasks")) {
                if (task.asInt() == ConnectProtocol.CONNECTOR_TASK) {
                    connectors.add(connector);
                } else {
                    tasks.add(new ConnectorTaskId(connector, task.asInt()));
                }
            }
        }
    }

    private static ObjectNode subscriptionJson(ExtendedWorkerState state, short version) {
        ObjectNode out = JSON.createObjectNode();
        out.put("version", version);
        out.put("url", state.url());
        out.put("config_offset", state.offset());
        ExtendedAssignment allocation = state.assignment();
        // A v0 payload has no allocation. For null or absent allocation bytes Kafka's reader returns its
        // empty assignment, the only one without a leader (the leader is a non-nullable string on the
        // wire): all three are written as null.
        if (version == 0 || allocation == null || allocation.leader() == null) {
            out.putNull("allocation");
        } else {
            out.set("allocation", assignmentJson(allocation));
        }
        return out;
    }

    private static ObjectNode assignmentJson(ExtendedAssignment assignment) {
        ObjectNode out = JSON.createObjectNode();
        out.put("version", assignment.version());
        out.put("error", assignment.error());
        out.put("leader", assignment.leader());
        out.put("leader_url", assignment.leaderUrl());
        out.put("config_offset", assignment.offset());
        out.set("connectors", strings(assignment.connectors()));
        out.set("tasks", taskIds(assignment.tasks()));
        out.set("revoked_connectors", strings(assignment.revokedConnectors()));
        out.set("revoked_tasks", taskIds(assignment.revokedTasks()));
        out.put("delay", assignment.delay());
        return out;
    }

    private static ArrayNode strings(Iterable<String> values) {
        ArrayNode out = JSON.createArrayNode();
        values.forEach(out::add);
        return out;
    }

    private static ArrayNode taskIds(Iterable<ConnectorTaskId> ids) {
        ArrayNode out = JSON.createArrayNode();
        for (ConnectorTaskId id : ids) {
            out.add(JSON.createObjectNode().put("connector", id.connector()).put("task", id.task()));
        }
        return out;
    }

    private static String hex(ByteBuffer buffer) {
        ByteBuffer copy = buffer.duplicate();
        byte[] bytes = new byte[copy.remaining()];
        copy.get(bytes);
        return HEX.formatHex(bytes);
    }
}
