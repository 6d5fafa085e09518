package io.connectbridge.connect.member;

import io.connectbridge.connect.wire.ConnectGroupWire.DescribeResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentResponse;

import java.io.IOException;

/** The requests a member sends to its coordinator (a seam for tests: the real one is over the network). */
public interface ConnectGroupClient extends AutoCloseable {
    HeartbeatResponse heartbeat(HeartbeatRequest request, long timeoutMs) throws IOException;

    DescribeResponse describe(String groupId, long timeoutMs) throws IOException;

    /** PrepareAssignment: the group as the coordinator wants this member to assign it. */
    PrepareAssignmentResponse prepare(PrepareAssignmentRequest request, long timeoutMs) throws IOException;

    /** InstallAssignment: the target this member computed. */
    InstallAssignmentResponse install(InstallAssignmentRequest request, long timeoutMs) throws IOException;

    /** Look the coordinator up again before the next request. */
    void coordinatorLost(String why);

    /** Interrupt a request in progress. */
    void wakeup();

    @Override
    void close();
}
