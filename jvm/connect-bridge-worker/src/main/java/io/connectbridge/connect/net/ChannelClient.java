package io.connectbridge.connect.net;

import io.connectbridge.connect.member.ConnectGroupClient;
import io.connectbridge.connect.wire.ConnectGroupWire;
import io.connectbridge.connect.wire.ConnectGroupWire.DescribeRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.DescribeResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.HeartbeatResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.InstallAssignmentResponse;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentRequest;
import io.connectbridge.connect.wire.ConnectGroupWire.PrepareAssignmentResponse;
import io.connectbridge.connect.wire.WireFormatException;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;

/** {@link ConnectGroupClient} over a {@link BridgeChannel}. */
public final class ChannelClient implements ConnectGroupClient {
    private static final short V0 = 0;
    private final BridgeChannel channel;

    public ChannelClient(BridgeChannel channel) {
        this.channel = channel;
    }

    @Override
    public HeartbeatResponse heartbeat(HeartbeatRequest request, long timeoutMs) throws IOException {
        ByteBuffer body = channel.request(ConnectGroupWire.HEARTBEAT, V0, request.encode(), timeoutMs);
        return (HeartbeatResponse) decode(ConnectGroupWire.HEARTBEAT, body);
    }

    @Override
    public DescribeResponse describe(String groupId, long timeoutMs) throws IOException {
        ByteBuffer body = channel.request(ConnectGroupWire.DESCRIBE, V0, new DescribeRequest(List.of(groupId)).encode(),
            timeoutMs);
        return (DescribeResponse) decode(ConnectGroupWire.DESCRIBE, body);
    }

    @Override
    public PrepareAssignmentResponse prepare(PrepareAssignmentRequest request, long timeoutMs) throws IOException {
        ByteBuffer body = channel.request(ConnectGroupWire.PREPARE_ASSIGNMENT, V0, request.encode(), timeoutMs);
        return (PrepareAssignmentResponse) decode(ConnectGroupWire.PREPARE_ASSIGNMENT, body);
    }

    @Override
    public InstallAssignmentResponse install(InstallAssignmentRequest request, long timeoutMs) throws IOException {
        ByteBuffer body = channel.request(ConnectGroupWire.INSTALL_ASSIGNMENT, V0, request.encode(), timeoutMs);
        return (InstallAssignmentResponse) decode(ConnectGroupWire.INSTALL_ASSIGNMENT, body);
    }

    private Object decode(short apiKey, ByteBuffer body) throws IOException {
        try {
            return ConnectGroupWire.decodeResponse(apiKey, body);
        } catch (WireFormatException e) {
            channel.coordinatorLost("malformed response: " + e.getMessage());
            throw new IOException("malformed response to API " + apiKey + ": " + e.getMessage(), e);
        }
    }

    @Override
    public void coordinatorLost(String why) {
        channel.coordinatorLost(why);
    }

    @Override
    public void wakeup() {
        channel.wakeup();
    }

    @Override
    public void close() {
        channel.close();
    }
}
