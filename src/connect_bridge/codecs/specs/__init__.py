"""Apache-Kafka-format JSON message specs for the Connect group APIs and the coordinator's state records.

A package (rather than a plain folder) so kafka-python's spec loader can read them with
``importlib.resources``; the Python classes that load them live in ``codecs.messages`` and
``codecs.records``.
"""
