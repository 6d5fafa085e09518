"""connect-bridge: an online migration bridge for Kafka Connect group membership.

Layers (imports point one way): codecs <- state <- bridge <- workers/drills <- pipeline, cli.
"""

__version__ = "0.1.0"
