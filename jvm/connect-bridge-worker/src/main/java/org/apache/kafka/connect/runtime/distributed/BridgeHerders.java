package org.apache.kafka.connect.runtime.distributed;

import io.connectbridge.connect.BridgeMemberSettings;
import io.connectbridge.connect.net.BridgeChannel;
import io.connectbridge.connect.net.ChannelClient;
import org.apache.kafka.clients.ClientUtils;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.runtime.ConnectMetrics;
import org.apache.kafka.connect.runtime.Worker;
import org.apache.kafka.connect.runtime.rest.RestClient;
import org.apache.kafka.connect.storage.ConfigBackingStore;
import org.apache.kafka.connect.storage.StatusBackingStore;

import java.util.List;
import java.util.concurrent.ExecutorService;

/**
 * Builds a {@link DistributedHerder} whose group member is a {@link BridgeWorkerGroupMember}.
 *
 * <p>It lives in Connect's package because the herder constructor that takes a member, and the
 * herder's rebalance listener, are package-private: they are not Kafka API, so {@link #checkSupported}
 * pins them to the 4.3 line and fails at start-up, loudly, on anything else.
 */
public final class BridgeHerders {
    public static final String SUPPORTED_LINE = "4.3.";

    private BridgeHerders() {
    }

    /** Refuses to start on a Kafka other than 4.3.x, or one whose herder lacks the constructor we use. */
    public static void checkSupported() {
        checkSupported(AppInfoParser.getVersion());
    }

    static void checkSupported(String kafkaVersion) {
        if (kafkaVersion == null || !kafkaVersion.startsWith(SUPPORTED_LINE)) {
            throw new ConnectException("connect-bridge-worker supports Kafka Connect 4.3.x only; this is "
                + kafkaVersion + ". Run this worker with group.protocol=classic, or use the add-on built for it.");
        }
        try {
            DistributedHerder.class.getDeclaredConstructor(DistributedConfig.class, Worker.class, String.class,
                String.class, StatusBackingStore.class, ConfigBackingStore.class, WorkerGroupMember.class,
                String.class, RestClient.class, ConnectMetrics.class, Time.class,
                ConnectorClientConfigOverridePolicy.class, List.class, ExecutorService.class, AutoCloseable[].class);
            DistributedHerder.RebalanceListener.class.getDeclaredConstructor(DistributedHerder.class, Time.class);
        } catch (NoSuchMethodException e) {
            throw new ConnectException("connect-bridge-worker supports Kafka Connect 4.3.x only: this runtime's "
                + "DistributedHerder has no constructor taking a group member (" + e.getMessage() + ")", e);
        }
    }

    /** The herder stock Connect would build, with our member in place of the classic one. */
    public static DistributedHerder create(DistributedConfig config, Time time, Worker worker, String kafkaClusterId,
                                           StatusBackingStore statusStore, ConfigBackingStore configStore,
                                           String restUrl, RestClient restClient,
                                           ConnectorClientConfigOverridePolicy policy, BridgeMemberSettings settings,
                                           AutoCloseable... uponShutdown) {
        checkSupported();
        String configured = config.getString(CommonClientConfigs.CLIENT_ID_CONFIG);
        String clientId = configured.isEmpty() ? "connect-" + worker.workerId() : configured;
        String groupId = config.getString(DistributedConfig.GROUP_ID_CONFIG);
        LogContext logContext = new LogContext("[Worker clientId=" + clientId + ", groupId=" + groupId + "] ");
        BridgeWorkerGroupMember member = new BridgeWorkerGroupMember(config, restUrl, configStore, time, clientId,
            logContext, settings, m -> new ChannelClient(new BridgeChannel(config,
                ClientUtils.parseAndValidateAddresses(config), groupId, clientId, m.metrics(), time, logContext)));
        DistributedHerder herder = new DistributedHerder(config, worker, worker.workerId(), kafkaClusterId,
            statusStore, configStore, member, restUrl, restClient, worker.metrics(), time, policy, List.of(), null,
            uponShutdown);
        member.setListener(herder.new RebalanceListener(time));
        configStore.setUpdateListener(herder.new ConfigUpdateListener());
        return herder;
    }
}
