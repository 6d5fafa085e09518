"""Bytes <-> typed values, and nothing else.

Two families live here: the Connect embedded protocol (JoinGroup metadata / SyncGroup assignment
payloads, built with ``construct``) and Kafka wire messages (kafka-python's JSON-spec engine, extended
with our own specs under ``specs/``).
"""
