"""Bytes <-> typed values, and nothing else.

Two families live here: the Connect embedded protocol (JoinGroup metadata / SyncGroup assignment
payloads, built with ``construct``) and Kafka wire messages (kafka-python's JSON-spec engine, extended
with our own specs under ``specs/``).
"""


def _bound_unsigned_varints() -> None:
    """Make the spec engine's generated decoders read at most 5 bytes per unsigned varint.

    Kafka's ``ByteUtils.readUnsignedVarint`` throws after 5 bytes ("Varint is too long"); the
    decoders kafka-python generates loop for as long as the continuation bit is set, building an
    ever larger integer, so a frame of N bytes of 0xff took O(N^2) time (300 KB stalled the event
    loop 3.6 s, and the frame limit is 100 MiB). Patched before any decoder is compiled: importing
    any ``connect_bridge.codecs`` module runs this first.
    """
    from kafka.protocol.schemas.fields.codecs.types import UnsignedVarInt32

    if getattr(UnsignedVarInt32, "_connect_bridge_bounded", False):
        return

    def emit_decode_from(cls: type, ctx: object, var_name: str, indent: str) -> None:
        b = ctx.next_var("b")  # type: ignore[attr-defined]
        shift = ctx.next_var("sh")  # type: ignore[attr-defined]
        emit = ctx.emit  # type: ignore[attr-defined]
        emit(indent, f"{var_name} = 0")
        emit(indent, f"{shift} = 0")
        emit(indent, "while True:")
        emit(indent, f"    {b} = data[pos]")
        emit(indent, "    pos += 1")
        emit(indent, f"    {var_name} |= ({b} & 0x7f) << {shift}")
        emit(indent, f"    if not ({b} & 0x80): break")
        emit(indent, f"    {shift} += 7")
        emit(indent, f"    if {shift} > 28: raise ValueError('varint is longer than 5 bytes')")

    UnsignedVarInt32.emit_decode_from = classmethod(emit_decode_from)  # type: ignore[method-assign]
    UnsignedVarInt32._connect_bridge_bounded = True  # type: ignore[attr-defined]


_bound_unsigned_varints()
