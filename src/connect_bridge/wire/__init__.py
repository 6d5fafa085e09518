"""The wire layer: the struct maps between Kafka's messages and the engine's typed requests and
responses, and a small Kafka-protocol client. See docs/architecture.md ("Layers")."""
