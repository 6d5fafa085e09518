"""The network edge: listeners, connection slots, connections, frame admission, the SASL gate, HTTP."""
