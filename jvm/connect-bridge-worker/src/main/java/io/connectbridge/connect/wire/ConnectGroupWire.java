package io.connectbridge.connect.wire;

import io.connectbridge.connect.wire.WireBuffer.Reader;
import io.connectbridge.connect.wire.WireBuffer.Writer;

import java.nio.ByteBuffer;
import java.util.List;

/**
 * The codec of the Connect group APIs 1000-1003, version 0 (flexible), with the field order of the
 * project's JSON specs ({@code src/connect_bridge/codecs/specs/ConnectGroup*.json}). Each message is a
 * record whose components are its fields in wire order; nested structs are records too. A nullable
 * struct is preceded by one byte, -1 when absent and 1 when present (KIP-893).
 */
public final class ConnectGroupWire {
    public static final short HEARTBEAT = 1000;
    public static final short PREPARE_ASSIGNMENT = 1001;
    public static final short INSTALL_ASSIGNMENT = 1002;
    public static final short DESCRIBE = 1003;

    private ConnectGroupWire() {
    }

    // ------------------------------------------------------------------ shared structs

    /** One connector's tasks. */
    public record ConnectorTasks(String connector, List<Integer> taskIds) {
        static void write(Writer w, ConnectorTasks t) {
            w.string(t.connector).array(t.taskIds, Writer::int32).noTags();
        }

        static ConnectorTasks read(Reader r) {
            ConnectorTasks t = new ConnectorTasks(r.string(), r.array(Reader::int32));
            r.tags();
            return t;
        }
    }

    /** Connector instances and tasks grouped by connector: the shape every ConnectorsAndTasks field has. */
    public record ConnectorsAndTasks(List<String> connectors, List<ConnectorTasks> tasks) {
        static void write(Writer w, ConnectorsAndTasks c) {
            w.array(c.connectors, Writer::string).array(c.tasks, ConnectorTasks::write).noTags();
        }

        static ConnectorsAndTasks read(Reader r) {
            ConnectorsAndTasks c = new ConnectorsAndTasks(r.array(Reader::string), r.array(ConnectorTasks::read));
            r.tags();
            return c;
        }

        static void writeNullable(Writer w, ConnectorsAndTasks c) {
            if (c == null) {
                w.int8(-1);
            } else {
                w.int8(1);
                write(w, c);
            }
        }

        static ConnectorsAndTasks readNullable(Reader r) {
            return r.int8() < 0 ? null : read(r);
        }
    }

    /** A connector and its task count (PrepareAssignment, Describe). */
    public record ConfiguredConnector(String name, int taskCount) {
        static void write(Writer w, ConfiguredConnector c) {
            w.string(c.name).int32(c.taskCount).noTags();
        }

        static ConfiguredConnector read(Reader r) {
            ConfiguredConnector c = new ConfiguredConnector(r.string(), r.int32());
            r.tags();
            return c;
        }
    }

    // ------------------------------------------------------------------ ConnectGroupHeartbeat (1000)

    /** A client-side assignor the member supports. */
    public record Assignor(String name, short minimumVersion, short maximumVersion, byte reason,
                           short metadataVersion, byte[] metadata) {
        static void write(Writer w, Assignor a) {
            w.string(a.name).int16(a.minimumVersion).int16(a.maximumVersion).int8(a.reason)
                .int16(a.metadataVersion).bytes(a.metadata).noTags();
        }

        static Assignor read(Reader r) {
            Assignor a = new Assignor(r.string(), r.int16(), r.int16(), r.int8(), r.int16(), r.bytes());
            r.tags();
            return a;
        }
    }

    public record HeartbeatRequest(String groupId, String memberId, int memberEpoch, String instanceId,
                                   String rackId, int rebalanceTimeoutMs, String workerUrl, long configOffset,
                                   String serverAssignor, List<Assignor> clientAssignors,
                                   ConnectorsAndTasks connectorsAndTasks) {
        public byte[] encode() {
            Writer w = new Writer();
            w.string(groupId).string(memberId).int32(memberEpoch).string(instanceId).string(rackId)
                .int32(rebalanceTimeoutMs).string(workerUrl).int64(configOffset).string(serverAssignor)
                .array(clientAssignors, Assignor::write);
            ConnectorsAndTasks.writeNullable(w, connectorsAndTasks);
            return w.noTags().toByteArray();
        }

        public static HeartbeatRequest decode(Reader r) {
            HeartbeatRequest m = new HeartbeatRequest(r.string(), r.string(), r.int32(), r.string(), r.string(),
                r.int32(), r.string(), r.int64(), r.string(), r.array(Assignor::read),
                ConnectorsAndTasks.readNullable(r));
            r.tags();
            return m;
        }
    }

    public record Assignment(byte error, ConnectorsAndTasks connectorsAndTasks, String leaderId, String leaderUrl,
                             long configOffset, short metadataVersion, byte[] metadata) {
        static void write(Writer w, Assignment a) {
            w.int8(a.error);
            ConnectorsAndTasks.write(w, a.connectorsAndTasks);
            w.string(a.leaderId).string(a.leaderUrl).int64(a.configOffset).int16(a.metadataVersion)
                .bytes(a.metadata).noTags();
        }

        static Assignment read(Reader r) {
            Assignment a = new Assignment(r.int8(), ConnectorsAndTasks.read(r), r.string(), r.string(), r.int64(),
                r.int16(), r.bytes());
            r.tags();
            return a;
        }
    }

    public record HeartbeatResponse(int throttleTimeMs, short errorCode, String errorMessage, String memberId,
                                    int memberEpoch, int heartbeatIntervalMs, Assignment assignment) {
        public byte[] encode() {
            Writer w = new Writer();
            w.int32(throttleTimeMs).int16(errorCode).string(errorMessage).string(memberId).int32(memberEpoch)
                .int32(heartbeatIntervalMs);
            if (assignment == null) {
                w.int8(-1);
            } else {
                w.int8(1);
                Assignment.write(w, assignment);
            }
            return w.noTags().toByteArray();
        }

        public static HeartbeatResponse decode(Reader r) {
            int throttle = r.int32();
            short error = r.int16();
            String message = r.string();
            String memberId = r.string();
            int epoch = r.int32();
            int interval = r.int32();
            Assignment assignment = r.int8() < 0 ? null : Assignment.read(r);
            r.tags();
            return new HeartbeatResponse(throttle, error, message, memberId, epoch, interval, assignment);
        }
    }

    // ------------------------------------------------------------------ PrepareAssignment (1001)

    public record PrepareAssignmentRequest(String groupId, String memberId, int memberEpoch) {
        public byte[] encode() {
            return new Writer().string(groupId).string(memberId).int32(memberEpoch).noTags().toByteArray();
        }

        public static PrepareAssignmentRequest decode(Reader r) {
            PrepareAssignmentRequest m = new PrepareAssignmentRequest(r.string(), r.string(), r.int32());
            r.tags();
            return m;
        }
    }

    public record MemberAssignor(short metadataVersion, byte reason, byte[] metadata) {
        static void write(Writer w, MemberAssignor a) {
            w.int16(a.metadataVersion).int8(a.reason).bytes(a.metadata).noTags();
        }

        static MemberAssignor read(Reader r) {
            MemberAssignor a = new MemberAssignor(r.int16(), r.int8(), r.bytes());
            r.tags();
            return a;
        }
    }

    public record PrepareMember(String memberId, int memberEpoch, String instanceId, String workerUrl,
                                long configOffset, MemberAssignor assignor, ConnectorsAndTasks connectorsAndTasks) {
        static void write(Writer w, PrepareMember m) {
            w.string(m.memberId).int32(m.memberEpoch).string(m.instanceId).string(m.workerUrl).int64(m.configOffset);
            MemberAssignor.write(w, m.assignor);
            ConnectorsAndTasks.write(w, m.connectorsAndTasks);
            w.noTags();
        }

        static PrepareMember read(Reader r) {
            PrepareMember m = new PrepareMember(r.string(), r.int32(), r.string(), r.string(), r.int64(),
                MemberAssignor.read(r), ConnectorsAndTasks.read(r));
            r.tags();
            return m;
        }
    }

    public record PrepareAssignmentResponse(int throttleTimeMs, short errorCode, String errorMessage, int groupEpoch,
                                            int assignmentEpoch, String assignorName, long configOffset,
                                            List<ConfiguredConnector> connectors, List<PrepareMember> members) {
        public byte[] encode() {
            return new Writer().int32(throttleTimeMs).int16(errorCode).string(errorMessage).int32(groupEpoch)
                .int32(assignmentEpoch).string(assignorName).int64(configOffset)
                .array(connectors, ConfiguredConnector::write).array(members, PrepareMember::write)
                .noTags().toByteArray();
        }

        public static PrepareAssignmentResponse decode(Reader r) {
            PrepareAssignmentResponse m = new PrepareAssignmentResponse(r.int32(), r.int16(), r.string(), r.int32(),
                r.int32(), r.string(), r.int64(), r.array(ConfiguredConnector::read), r.array(PrepareMember::read));
            r.tags();
            return m;
        }
    }

    // ------------------------------------------------------------------ InstallAssignment (1002)

    public record InstallMember(String memberId, ConnectorsAndTasks connectorsAndTasks, short metadataVersion,
                                byte[] metadata) {
        static void write(Writer w, InstallMember m) {
            w.string(m.memberId);
            ConnectorsAndTasks.write(w, m.connectorsAndTasks);
            w.int16(m.metadataVersion).bytes(m.metadata).noTags();
        }

        static InstallMember read(Reader r) {
            InstallMember m = new InstallMember(r.string(), ConnectorsAndTasks.read(r), r.int16(), r.bytes());
            r.tags();
            return m;
        }
    }

    public record InstallAssignmentRequest(String groupId, String memberId, int memberEpoch, int groupEpoch,
                                           byte error, List<InstallMember> members) {
        public byte[] encode() {
            return new Writer().string(groupId).string(memberId).int32(memberEpoch).int32(groupEpoch).int8(error)
                .array(members, InstallMember::write).noTags().toByteArray();
        }

        public static InstallAssignmentRequest decode(Reader r) {
            InstallAssignmentRequest m = new InstallAssignmentRequest(r.string(), r.string(), r.int32(), r.int32(),
                r.int8(), r.array(InstallMember::read));
            r.tags();
            return m;
        }
    }

    public record InstallAssignmentResponse(int throttleTimeMs, short errorCode, String errorMessage) {
        public byte[] encode() {
            return new Writer().int32(throttleTimeMs).int16(errorCode).string(errorMessage).noTags().toByteArray();
        }

        public static InstallAssignmentResponse decode(Reader r) {
            InstallAssignmentResponse m = new InstallAssignmentResponse(r.int32(), r.int16(), r.string());
            r.tags();
            return m;
        }
    }

    // ------------------------------------------------------------------ ConnectGroupDescribe (1003), v0

    public record DescribeRequest(List<String> groupIds) {
        public byte[] encode() {
            return new Writer().array(groupIds, Writer::string).noTags().toByteArray();
        }

        public static DescribeRequest decode(Reader r) {
            DescribeRequest m = new DescribeRequest(r.array(Reader::string));
            r.tags();
            return m;
        }
    }

    public record DescribedMember(String memberId, String instanceId, String rackId, String clientId,
                                  String clientHost, String workerUrl, String protocol, int memberEpoch,
                                  String memberState, long configOffset, ConnectorsAndTasks assignment,
                                  ConnectorsAndTasks targetAssignment) {
        static void write(Writer w, DescribedMember m) {
            w.string(m.memberId).string(m.instanceId).string(m.rackId).string(m.clientId).string(m.clientHost)
                .string(m.workerUrl).string(m.protocol).int32(m.memberEpoch).string(m.memberState)
                .int64(m.configOffset);
            ConnectorsAndTasks.write(w, m.assignment);
            ConnectorsAndTasks.writeNullable(w, m.targetAssignment);
            w.noTags();
        }

        static DescribedMember read(Reader r) {
            DescribedMember m = new DescribedMember(r.string(), r.string(), r.string(), r.string(), r.string(),
                r.string(), r.string(), r.int32(), r.string(), r.int64(), ConnectorsAndTasks.read(r),
                ConnectorsAndTasks.readNullable(r));
            r.tags();
            return m;
        }
    }

    public record DescribedGroup(short errorCode, String errorMessage, String groupId, String groupType,
                                 String groupState, int groupEpoch, int assignmentEpoch, String assignorName,
                                 String leaderId, String leaderUrl, long configOffset,
                                 List<ConfiguredConnector> connectors, List<DescribedMember> members) {
        static void write(Writer w, DescribedGroup g) {
            w.int16(g.errorCode).string(g.errorMessage).string(g.groupId).string(g.groupType).string(g.groupState)
                .int32(g.groupEpoch).int32(g.assignmentEpoch).string(g.assignorName).string(g.leaderId)
                .string(g.leaderUrl).int64(g.configOffset).array(g.connectors, ConfiguredConnector::write)
                .array(g.members, DescribedMember::write).noTags();
        }

        static DescribedGroup read(Reader r) {
            DescribedGroup g = new DescribedGroup(r.int16(), r.string(), r.string(), r.string(), r.string(),
                r.int32(), r.int32(), r.string(), r.string(), r.string(), r.int64(),
                r.array(ConfiguredConnector::read), r.array(DescribedMember::read));
            r.tags();
            return g;
        }
    }

    public record DescribeResponse(int throttleTimeMs, List<DescribedGroup> groups) {
        public byte[] encode() {
            return new Writer().int32(throttleTimeMs).array(groups, DescribedGroup::write).noTags().toByteArray();
        }

        public static DescribeResponse decode(Reader r) {
            DescribeResponse m = new DescribeResponse(r.int32(), r.array(DescribedGroup::read));
            r.tags();
            return m;
        }
    }

    // ------------------------------------------------------------------ dispatch

    /** Decodes a whole request body of {@code apiKey} v0; trailing bytes are an error. */
    public static Object decodeRequest(int apiKey, ByteBuffer body) {
        Reader r = new Reader(body);
        Object m = switch (apiKey) {
            case HEARTBEAT -> HeartbeatRequest.decode(r);
            case PREPARE_ASSIGNMENT -> PrepareAssignmentRequest.decode(r);
            case INSTALL_ASSIGNMENT -> InstallAssignmentRequest.decode(r);
            case DESCRIBE -> DescribeRequest.decode(r);
            default -> throw new WireFormatException("not a Connect group API: " + apiKey);
        };
        return whole(r, m);
    }

    /** Decodes a whole response body of {@code apiKey} v0; trailing bytes are an error. */
    public static Object decodeResponse(int apiKey, ByteBuffer body) {
        Reader r = new Reader(body);
        Object m = switch (apiKey) {
            case HEARTBEAT -> HeartbeatResponse.decode(r);
            case PREPARE_ASSIGNMENT -> PrepareAssignmentResponse.decode(r);
            case INSTALL_ASSIGNMENT -> InstallAssignmentResponse.decode(r);
            case DESCRIBE -> DescribeResponse.decode(r);
            default -> throw new WireFormatException("not a Connect group API: " + apiKey);
        };
        return whole(r, m);
    }

    private static Object whole(Reader r, Object m) {
        if (r.remaining() != 0) {
            throw new WireFormatException(r.remaining() + " trailing bytes after " + m.getClass().getSimpleName());
        }
        return m;
    }

    /** The body of any message record of this class. */
    public static byte[] encode(Object message) {
        if (message instanceof HeartbeatRequest m) {
            return m.encode();
        } else if (message instanceof HeartbeatResponse m) {
            return m.encode();
        } else if (message instanceof PrepareAssignmentRequest m) {
            return m.encode();
        } else if (message instanceof PrepareAssignmentResponse m) {
            return m.encode();
        } else if (message instanceof InstallAssignmentRequest m) {
            return m.encode();
        } else if (message instanceof InstallAssignmentResponse m) {
            return m.encode();
        } else if (message instanceof DescribeRequest m) {
            return m.encode();
        } else if (message instanceof DescribeResponse m) {
            return m.encode();
        }
        throw new IllegalArgumentException("not a Connect group message: " + message);
    }
}
