package io.connectbridge.connect.net;

import io.connectbridge.connect.wire.WireBuffer;
import org.apache.kafka.clients.ClientUtils;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.message.ApiVersionsRequestData;
import org.apache.kafka.common.message.ApiVersionsResponseData;
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
 * <p>The coordinator is found with FindCoordinator (key type 0, the highest version from 1 to 4 the
 * bootstrap server's ApiVersions offers) through the bootstrap servers, and looked up again after
 * {@link #coordinatorLost} (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a disconnect), which is how a
 * worker follows a group to another bridge. The coordinator found must list the Connect group APIs
 * (1000-1003) in its ApiVersions: a plain Kafka broker does not (it would close the connection on
 * them), so that is logged as an ERROR that names the problem and asked again after a growing
 * backoff (1 s doubling to 60 s).
 */
public final class BridgeChannel implements Closeable {
    private static final short FIND_COORDINATOR = 10;
    private static final short FIND_COORDINATOR_MIN = 1;
    private static final short FIND_COORDINATOR_MAX = 4;
    private static final short API_VERSIONS = 18;
    private static final short API_VERSIONS_VERSION = 3;
    /** The Connect group APIs a coordinator must offer (all at version 0). */
    private static final short[] CONNECT_GROUP_APIS = {1000, 1001, 1002, 1003};
    private static final long UNSUPPORTED_BACKOFF_MIN_MS = 1000;
    private static final long UNSUPPORTED_BACKOFF_MAX_MS = 60000;
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
    private long unsupportedBackoffMs;
    private long notBeforeMs;
    private String unsupportedReason;

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
        long now = time.milliseconds();
        long deadline = now + timeoutMs;
        if (coordinatorNode == null) {
            if (now < notBeforeMs) {
                throw new IOException(unsupportedReason + " (asking again in " + (notBeforeMs - now) + " ms)");
            }
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
            InetSocketAddress found;
            int nodeId;
            try {
                connect(node, address, deadline);
                short version = findCoordinatorVersion(apiVersions(node, deadline), address);
                FindCoordinatorRequestData data = new FindCoordinatorRequestData().setKeyType((byte) 0);
                if (version >= 4) {
                    data.setCoordinatorKeys(List.of(groupId));
                } else {
                    data.setKey(groupId);
                }
                ByteBuffer reqBody = MessageUtil.toByteBufferAccessor(data, version).buffer();
                boolean flexible = version >= 3;
                ByteBuffer resp = roundTrip(node, FIND_COORDINATOR, version, reqBody, deadline, flexible, flexible);
                FindCoordinatorResponseData answer = new FindCoordinatorResponseData(new ByteBufferAccessor(resp),
                    version);
                selector.close(node);
                short error;
                String message;
                String host;
                int port;
                if (version >= 4) {
                    if (answer.coordinators().isEmpty()) {
                        throw new IOException("FindCoordinator answered no coordinator");
                    }
                    FindCoordinatorResponseData.Coordinator c = answer.coordinators().get(0);
                    error = c.errorCode();
                    message = c.errorMessage();
                    host = c.host();
                    port = c.port();
                    nodeId = c.nodeId();
                } else {
                    error = answer.errorCode();
                    message = answer.errorMessage();
                    host = answer.host();
                    port = answer.port();
                    nodeId = answer.nodeId();
                }
                if (error != 0) {
                    throw new IOException("FindCoordinator for group " + groupId + " answered error " + error + " ("
                        + message + ")");
                }
                found = new InetSocketAddress(host, port);
                if (!found.equals(coordinator)) {
                    log.info("Connect group coordinator for {} is {} (node {}), found through {} (FindCoordinator "
                        + "v{})", groupId, found, nodeId, address, version);
                }
            } catch (IOException e) {
                selector.close(node);
                last = e;
                log.debug("FindCoordinator through {} failed: {}", address, e.getMessage());
                continue;
            }
            String candidate = "coordinator-" + nodeId + "-" + found;
            connect(candidate, found, deadline);
            checkConnectGroupApis(candidate, found, deadline);
            coordinator = found;
            coordinatorNode = candidate;
            return;
        }
        throw last != null ? last : new IOException("timed out looking for the coordinator of " + groupId);
    }

    /** The highest FindCoordinator version both sides speak. */
    private static short findCoordinatorVersion(ApiVersionsResponseData versions, InetSocketAddress address)
        throws IOException {
        ApiVersionsResponseData.ApiVersion v = versions.apiKeys().find(FIND_COORDINATOR);
        if (v == null || v.maxVersion() < FIND_COORDINATOR_MIN || v.minVersion() > FIND_COORDINATOR_MAX) {
            throw new IOException(address + " offers no FindCoordinator version from " + FIND_COORDINATOR_MIN
                + " to " + FIND_COORDINATOR_MAX);
        }
        return (short) Math.min(v.maxVersion(), FIND_COORDINATOR_MAX);
    }

    /**
     * The coordinator must offer ConnectGroupHeartbeat, PrepareAssignment, InstallAssignment and
     * ConnectGroupDescribe at version 0. Otherwise it is not a connect-bridge (most likely a Kafka
     * broker, which coordinates classic and consumer groups only): ERROR, then a growing backoff.
     */
    private void checkConnectGroupApis(String node, InetSocketAddress address, long deadline) throws IOException {
        ApiVersionsResponseData versions;
        try {
            versions = apiVersions(node, deadline);
        } catch (IOException e) {
            selector.close(node);
            throw e;
        }
        List<Short> missing = new java.util.ArrayList<>();
        for (short key : CONNECT_GROUP_APIS) {
            ApiVersionsResponseData.ApiVersion v = versions.apiKeys().find(key);
            if (v == null || v.minVersion() > 0) {
                missing.add(key);
            }
        }
        if (missing.isEmpty()) {
            unsupportedBackoffMs = 0;
            unsupportedReason = null;
            return;
        }
        selector.close(node);
        unsupportedBackoffMs = unsupportedBackoffMs == 0 ? UNSUPPORTED_BACKOFF_MIN_MS
            : Math.min(UNSUPPORTED_BACKOFF_MAX_MS, unsupportedBackoffMs * 2);
        notBeforeMs = time.milliseconds() + unsupportedBackoffMs;
        unsupportedReason = "the coordinator of group " + groupId + " at " + address + " does not support the Connect "
            + "group APIs " + missing + " (ConnectGroupHeartbeat and friends)";
        log.error("group.protocol=connect needs a connect-bridge as the group coordinator, but {}: it is probably a "
            + "plain Kafka broker. Point bootstrap.servers at a connect-bridge (connect-bridge serve --upstream ...) or "
            + "run this worker with group.protocol=classic. Asking again in {} ms", unsupportedReason,
            unsupportedBackoffMs);
        throw new IOException(unsupportedReason);
    }

    private ApiVersionsResponseData apiVersions(String node, long deadline) throws IOException {
        ApiVersionsRequestData data = new ApiVersionsRequestData().setClientSoftwareName("connect-bridge-worker")
            .setClientSoftwareVersion("0.1.0");
        ByteBuffer body = MessageUtil.toByteBufferAccessor(data, API_VERSIONS_VERSION).buffer();
        // ApiVersions answers with response header v0 whatever the version (KIP-511).
        ByteBuffer resp = roundTrip(node, API_VERSIONS, API_VERSIONS_VERSION, body, deadline, true, false);
        ApiVersionsResponseData answer = new ApiVersionsResponseData(new ByteBufferAccessor(resp),
            API_VERSIONS_VERSION);
        if (answer.errorCode() != 0) {
            throw new IOException("ApiVersions answered error " + answer.errorCode());
        }
        return answer;
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
        return roundTrip(node, apiKey, version, body, deadline, true, true);
    }

    /**
     * @param flexibleRequest  request header v2 (with tagged fields), else v1
     * @param flexibleResponse response header v1 (with tagged fields), else v0
     */
    private ByteBuffer roundTrip(String node, short apiKey, short version, ByteBuffer body, long deadline,
                                 boolean flexibleRequest, boolean flexibleResponse) throws IOException {
        int id = ++correlationId;
        WireBuffer.Writer headerWriter = new WireBuffer.Writer().int16(apiKey).int16(version).int32(id)
            .legacyString(clientId);
        if (flexibleRequest) {
            headerWriter.noTags();
        }
        byte[] header = headerWriter.toByteArray();
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
                if (flexibleResponse) {
                    new WireBuffer.Reader(payload).tags(); // response header v1
                }
                return payload.slice();
            }
        }
    }

    @Override
    public synchronized void close() {
        selector.close();
    }
}
