"""Apache Kafka 4.3.1's own KIP-848 consumer-group message specs (API keys 68 and 69).

kafka-python 3.0 ships no ConsumerGroupHeartbeat or ConsumerGroupDescribe spec, and the bridge relays
both upstream undecoded; these copies (field layout checked against the 4.3.1 ``kafka-clients`` jar's
generated schemas) let tests speak them to a real broker (``codecs.consumer_group``). Kept out of the
parent package, which holds only the bridge's own APIs and records.
"""
