package io.connectbridge.connect;

import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.runtime.Worker;
import org.apache.kafka.connect.runtime.WorkerConfigTransformer;
import org.apache.kafka.connect.runtime.distributed.BridgeHerders;
import org.apache.kafka.connect.runtime.distributed.DistributedConfig;
import org.apache.kafka.connect.runtime.distributed.DistributedHerder;
import org.apache.kafka.connect.runtime.isolation.Plugins;
import org.apache.kafka.connect.runtime.rest.RestClient;
import org.apache.kafka.connect.runtime.rest.RestServer;
import org.apache.kafka.connect.storage.ConfigBackingStore;
import org.apache.kafka.connect.storage.Converter;
import org.apache.kafka.connect.storage.KafkaConfigBackingStore;
import org.apache.kafka.connect.storage.KafkaOffsetBackingStore;
import org.apache.kafka.connect.storage.KafkaStatusBackingStore;
import org.apache.kafka.connect.storage.StatusBackingStore;
import org.apache.kafka.connect.util.ConnectUtils;
import org.apache.kafka.connect.util.SharedTopicAdmin;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.HashMap;
import java.util.Map;

/**
 * The Connect distributed worker's main class, with a choice of group protocol.
 *
 * <p>{@code group.protocol} unset or {@code classic}: everything is stock {@link ConnectDistributed}
 * (the properties pass untouched, the herder is built by {@code super}). {@code group.protocol=connect}:
 * the membership keys leave the properties ({@link BridgeMemberSettings}), and the herder is built as
 * stock builds it, with a {@code BridgeWorkerGroupMember} that speaks ConnectGroupHeartbeat.
 *
 * <pre>
 * CLASSPATH=connect-bridge-worker-0.1.0.jar bin/kafka-run-class.sh io.connectbridge.connect.BridgeConnectDistributed \
 *     config/connect-distributed.properties
 * </pre>
 */
public class BridgeConnectDistributed extends ConnectDistributed {
    private static final Logger log = LoggerFactory.getLogger(BridgeConnectDistributed.class);

    private BridgeMemberSettings settings = new BridgeMemberSettings(BridgeMemberSettings.GroupProtocol.CLASSIC,
        null, null, false);

    public BridgeConnectDistributed(String... args) {
        super(args);
    }

    public static void main(String[] args) {
        new BridgeConnectDistributed(args).run();
    }

    /** The membership settings read from the last properties (classic until then). */
    public BridgeMemberSettings settings() {
        return settings;
    }

    @Override
    protected DistributedConfig createConfig(Map<String, String> workerProps) {
        BridgeMemberSettings.Split split = BridgeMemberSettings.split(workerProps);
        settings = split.settings();
        if (settings.protocol() == BridgeMemberSettings.GroupProtocol.CONNECT) {
            BridgeHerders.checkSupported();
            log.info("group.protocol=connect: this worker joins its group with ConnectGroupHeartbeat "
                + "(connect-bridge-worker){}{}", settings.instanceId() == null ? "" : ", group.instance.id="
                + settings.instanceId(), settings.serverAssignor() == null ? "" : ", group.remote.assignor="
                + settings.serverAssignor());
        }
        return super.createConfig(split.workerProps());
    }

    @Override
    protected DistributedHerder createHerder(DistributedConfig config, String workerId, Plugins plugins,
                                             ConnectorClientConfigOverridePolicy policy, RestServer restServer,
                                             RestClient restClient) {
        if (settings.protocol() == BridgeMemberSettings.GroupProtocol.CLASSIC) {
            return super.createHerder(config, workerId, plugins, policy, restServer, restClient);
        }
        // What stock ConnectDistributed.createHerder builds (public constructors only), then our herder.
        String kafkaClusterId = config.kafkaClusterId();
        String clientIdBase = ConnectUtils.clientIdBase(config);
        Map<String, Object> adminProps = new HashMap<>(config.originals());
        ConnectUtils.addMetricsContextProperties(adminProps, config, kafkaClusterId);
        adminProps.put("client.id", clientIdBase + "shared-admin");
        SharedTopicAdmin sharedAdmin = new SharedTopicAdmin(adminProps);

        KafkaOffsetBackingStore offsetStore = new KafkaOffsetBackingStore(sharedAdmin, () -> clientIdBase,
            plugins.newInternalConverter(true, JsonConverter.class.getName(), Map.of("schemas.enable", "false")));
        offsetStore.configure(config);

        Worker worker = new Worker(workerId, Time.SYSTEM, plugins, config, offsetStore, policy);
        WorkerConfigTransformer configTransformer = worker.configTransformer();
        Converter internalValueConverter = worker.getInternalValueConverter();

        StatusBackingStore statusStore = new KafkaStatusBackingStore(Time.SYSTEM, internalValueConverter, sharedAdmin,
            clientIdBase);
        statusStore.configure(config);

        ConfigBackingStore configStore = new KafkaConfigBackingStore(internalValueConverter, config,
            configTransformer, sharedAdmin, clientIdBase);

        return BridgeHerders.create(config, Time.SYSTEM, worker, kafkaClusterId, statusStore, configStore,
            restServer.advertisedUrl().toString(), restClient, policy, settings, sharedAdmin);
    }
}
