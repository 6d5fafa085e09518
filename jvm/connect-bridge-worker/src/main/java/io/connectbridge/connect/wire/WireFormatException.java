package io.connectbridge.connect.wire;

/** A message that does not parse: a truncated frame, a bad length, or trailing bytes. */
public class WireFormatException extends RuntimeException {
    public WireFormatException(String message) {
        super(message);
    }
}
