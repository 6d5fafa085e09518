package io.connectbridge.connect.net;

import io.connectbridge.connect.wire.WireBuffer;
import org.apache.kafka.clients.ClientUtils;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.message.FindCoordinatorRequestData;
import org.apache.kafka.common.message.FindCoordinatorResponseData;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.network.ByteBufferSend;
import org.apache.kafka.common.network.ChannelBuilder;
import org.apache.kafka.common.network.ChannelState;
import org.apache.kafka.common.network.NetworkReceive;
import org.apache.kafka.common.network.NetworkSend;
import org.apache.kafka.common.network.Selector;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.slf4j.Logger;

import java.io.Closeable;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;

/**
 * One request at a time to the group's coordinator, over kafka-clients' own {@link Selector} and
 * {@link ClientUtils#createChannelBuilder channel builder}: {@code security.protocol}, {@code ssl.*} and
 * {@code sasl.*} of the worker apply as they do to its other clients (TLS, the SASL exchange and
 * re-authentication happen inside the channel). The framing is ours, because the Connect group API
 * keys (1000-1003) are not in kafka-clients' {@code ApiKeys}.
 *
 * <p>The coordinator is found with FindCoordinator (v4, key type 0) through the bootstrap servers, and
 * looked up again after {@link #coordinatorLost} (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a
 * disconnect), which is how a worker follows a group to another bridge.
 */
public final class BridgeChannel implements Closeable {
    private static final short FIND_COORDINATOR = 10;
    private static final short FIND_COORDINATOR_VERSION = 4;
    private static final int BUFFER = 64 * 1024;

    private final Selector selector;
    private final List<InetSocketAddress> bootstrap;
    private final String groupId;
    private final String clientId;
    private final Time time;
    private final Logger log;
    private int correlationId;
    private int nextBootstrap;
    private String coordinatorNode;
    private InetSocketAddress coordinator;

    public BridgeChannel(AbstractConfig config, List<InetSocketAddress> bootstrap, String groupId, String clientId,
                         Metrics metrics, Time time, LogContext logContext) {
        this(ClientUtils.createChannelBuilder(config, time, logContext), bootstrap, groupId, clientId, metrics, time,
            logContext);
    }

    public BridgeChannel(ChannelBuilder channelBuilder, List<InetSocketAddress> bootstrap, String groupId,
                         String clientId, Metrics metrics, Time time, LogContext logContext) {
        this.selector = new Selector(Selector.NO_IDLE_TIMEOUT_MS, metrics, time, "connect-bridge-member",
            channelBuilder, logContext);
        this.bootstrap = List.copyOf(bootstrap);
        this.groupId = groupId;
        this.clientId = clientId;
        this.time = time;
        this.log = logContext.logger(BridgeChannel.class);
    }

    /** The coordinator's address, or null while unknown. */
    public synchronized InetSocketAddress coordinator() {
        return coordinator;
    }

    /** Forget the coordinator: the next request looks it up again. */
    public synchronized void coordinatorLost(String why) {
        if (coordinatorNode != null) {
            log.info("Connect group coordinator {} lost ({}): will look it up again", coordinator, why);
            selector.close(coordinatorNode);
        }
        coordinatorNode = null;
        coordinator = null;
    }

    /** Interrupts a {@link #request} blocked in the selector (it then fails with an IOException). */
    public void wakeup() {
        selector.wakeup();
    }

    /**
     * Sends one request of {@code apiKey}/{@code version} (flexible: request header v2, response header
     * v1) to the coordinator and returns the response body.
     */
    public synchronized ByteBuffer request(short apiKey, short version, byte[] body, long timeoutMs)
        throws IOException {
        long deadline = time.milliseconds() + timeoutMs;
        if (coordinatorNode == null) {
            findCoordinator(deadline);
        }
        try {
            return roundTrip(coordinatorNode, apiKey, version, ByteBuffer.wrap(body), deadline);
        } catch (IOException e) {
            coordinatorLost(e.getMessage());
            throw e;
        }
    }

    private void findCoordinator(long deadline) throws IOException {
        IOException last = null;
        for (int i = 0; i < bootstrap.size() && time.milliseconds() < deadline; i++) {
            InetSocketAddress address = bootstrap.get(nextBootstrap++ % bootstrap.size());
            String node = "bootstrap-" + address;
            try {
                connect(node, address, deadline);
                FindCoordinatorRequestData data = new FindCoordinatorRequestData()
                    .setKeyType((byte) 0).setCoordinatorKeys(List.of(groupId));
                ByteBuffer reqBody = MessageUtil.toByteBufferAccessor(data, FIND_COORDINATOR_VERSION).buffer();
                ByteBuffer resp = roundTrip(node, FIND_COORDINATOR, FIND_COORDINATOR_VERSION, reqBody, deadline);
                FindCoordinatorResponseData answer = new FindCoordinatorResponseData(new ByteBufferAccessor(resp),
                    FIND_COORDINATOR_VERSION);
                selector.close(node);
                for (FindCoordinatorResponseData.Coordinator c : answer.coordinators()) {
                    if (c.errorCode() != 0) {
                        throw new IOException("FindCoordinator for group " + groupId + " answered error "
                            + c.errorCode() + " (" + c.errorMessage() + ")");
                    }
                    InetSocketAddress found = new InetSocketAddress(c.host(), c.port());
                    if (!found.equals(coordinator)) {
                        log.info("Connect group coordinator for {} is {} (node {}), found through {}", groupId,
                            found, c.nodeId(), address);
                    }
                    coordinator = found;
                    coordinatorNode = "coordinator-" + c.nodeId() + "-" + found;
                    connect(coordinatorNode, found, deadline);
                    return;
                }
                throw new IOException("FindCoordinator answered no coordinator");
            } catch (IOException e) {
                selector.close(node);
                last = e;
                log.debug("FindCoordinator through {} failed: {}", address, e.getMessage());
            }
        }
        throw last != null ? last : new IOException("timed out looking for the coordinator of " + groupId);
    }

    private void connect(String node, InetSocketAddress address, long deadline) throws IOException {
        if (selector.isChannelReady(node)) {
            return;
        }
        if (selector.channel(node) == null) {
            selector.connect(node, address, BUFFER, BUFFER);
        }
        while (!selector.isChannelReady(node)) {
            long left = deadline - time.milliseconds();
            if (left <= 0) {
                selector.close(node);
                throw new IOException("timed out connecting to " + address);
            }
            selector.poll(Math.min(left, 100));
            checkDisconnected(node, address);
        }
    }

    private void checkDisconnected(String node, Object where) throws IOException {
        Map<String, ChannelState> gone = selector.disconnected();
        ChannelState state = gone.get(node);
        if (state != null) {
            if (state.exception() != null) {
                throw new IOException("connection to " + where + " failed: " + state.exception().getMessage(),
                    state.exception());
            }
            throw new IOException("disconnected from " + where + " (" + state.state() + ")");
        }
    }

    private ByteBuffer roundTrip(String node, short apiKey, short version, ByteBuffer body, long deadline)
        throws IOException {
        int id = ++correlationId;
        byte[] header = new WireBuffer.Writer().int16(apiKey).int16(version).int32(id).legacyString(clientId)
            .noTags().toByteArray();
        ByteBuffer frame = ByteBuffer.allocate(header.length + body.remaining());
        frame.put(header).put(body.duplicate()).flip();
        selector.send(new NetworkSend(node, ByteBufferSend.sizePrefixed(frame)));
        while (true) {
            long left = deadline - time.milliseconds();
            if (left <= 0) {
                selector.close(node);
                throw new IOException("request " + apiKey + " timed out");
            }
            selector.poll(Math.min(left, 100));
            checkDisconnected(node, node);
            for (NetworkReceive receive : selector.completedReceives()) {
                if (!receive.source().equals(node)) {
                    continue;
                }
                ByteBuffer payload = receive.payload();
                int answered = payload.getInt();
                if (answered != id) {
                    selector.close(node);
                    throw new IOException("correlation id " + answered + " answered request " + id);
                }
                WireBuffer.Reader r = new WireBuffer.Reader(payload);
                r.tags(); // response header v1
                return payload.slice();
            }
        }
    }

    @Override
    public synchronized void close() {
        selector.close();
    }
}
