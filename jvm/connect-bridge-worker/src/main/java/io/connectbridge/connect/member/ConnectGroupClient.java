package io.connectbridge.connect.member;

import io.connectbridge.connect.wire.ConnectGroupWire.DescribeResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;

import java.io.IOException;

/** The requests a member sends to its coordinator (a seam for tests: the real one is over the network). */
public interface ConnectGroupClient extends AutoCloseable {
    HeartbeatResponse heartbeat(HeartbeatRequest request, long timeoutMs) throws IOException;

    DescribeResponse describe(String groupId, long timeoutMs) throws IOException;

    /** Look the coordinator up again before the next request. */
    void coordinatorLost(String why);

    /** Interrupt a request in progress. */
    void wakeup();

    @Override
    void close();
}
