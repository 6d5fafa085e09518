"""The bridge's links to the upstream Kafka cluster: its brokers, relayed connections, client kinds."""
