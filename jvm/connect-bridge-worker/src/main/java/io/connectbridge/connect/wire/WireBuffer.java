package io.connectbridge.connect.wire;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;

/**
 * The primitives of Kafka's flexible message versions (KIP-482), which every Connect group API uses
 * at every version: compact strings, arrays and bytes carry an unsigned varint of length + 1 (0 for
 * null), and every struct ends with a tagged-field section (we write none and skip any we read).
 */
public final class WireBuffer {
    private WireBuffer() {
    }

    /** Appends fields in wire order. */
    public static final class Writer {
        private final ByteArrayOutputStream out = new ByteArrayOutputStream(256);

        public Writer int8(int v) {
            out.write(v);
            return this;
        }

        public Writer int16(int v) {
            out.write(v >>> 8);
            out.write(v);
            return this;
        }

        public Writer int32(int v) {
            int16(v >>> 16);
            return int16(v);
        }

        public Writer int64(long v) {
            int32((int) (v >>> 32));
            return int32((int) v);
        }

        public Writer uvarint(int v) {
            while ((v & ~0x7f) != 0) {
                out.write((v & 0x7f) | 0x80);
                v >>>= 7;
            }
            out.write(v);
            return this;
        }

        /** A compact nullable or non-null string. */
        public Writer string(String s) {
            if (s == null) {
                return uvarint(0);
            }
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            uvarint(b.length + 1);
            out.write(b, 0, b.length);
            return this;
        }

        /** A non-flexible nullable string (int16 length), as in request header v2's client id. */
        public Writer legacyString(String s) {
            if (s == null) {
                return int16(-1);
            }
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            int16(b.length);
            out.write(b, 0, b.length);
            return this;
        }

        public Writer bytes(byte[] b) {
            if (b == null) {
                return uvarint(0);
            }
            uvarint(b.length + 1);
            out.write(b, 0, b.length);
            return this;
        }

        public <T> Writer array(List<T> items, java.util.function.BiConsumer<Writer, T> element) {
            if (items == null) {
                return uvarint(0);
            }
            uvarint(items.size() + 1);
            for (T item : items) {
                element.accept(this, item);
            }
            return this;
        }

        /** An empty tagged-field section: the end of every flexible struct. */
        public Writer noTags() {
            return uvarint(0);
        }

        public byte[] toByteArray() {
            return out.toByteArray();
        }
    }

    /** Reads fields in wire order; throws {@link WireFormatException} on truncated or bad input. */
    public static final class Reader {
        private final ByteBuffer buf;

        public Reader(ByteBuffer buf) {
            this.buf = buf;
        }

        public Reader(byte[] bytes) {
            this(ByteBuffer.wrap(bytes));
        }

        private void need(int n) {
            if (buf.remaining() < n) {
                throw new WireFormatException("truncated message: need " + n + " bytes, " + buf.remaining() + " left");
            }
        }

        public byte int8() {
            need(1);
            return buf.get();
        }

        public short int16() {
            need(2);
            return buf.getShort();
        }

        public int int32() {
            need(4);
            return buf.getInt();
        }

        public long int64() {
            need(8);
            return buf.getLong();
        }

        public int uvarint() {
            int value = 0;
            for (int shift = 0; shift < 35; shift += 7) {
                byte b = int8();
                value |= (b & 0x7f) << shift;
                if ((b & 0x80) == 0) {
                    return value;
                }
            }
            throw new WireFormatException("varint too long");
        }

        private int compactLength() {
            int n = uvarint() - 1;
            if (n > buf.remaining()) {
                throw new WireFormatException("length " + n + " beyond the message");
            }
            return n;
        }

        public String string() {
            int n = compactLength();
            if (n < 0) {
                return null;
            }
            byte[] b = new byte[n];
            buf.get(b);
            return new String(b, StandardCharsets.UTF_8);
        }

        public String legacyString() {
            int n = int16();
            if (n < 0) {
                return null;
            }
            need(n);
            byte[] b = new byte[n];
            buf.get(b);
            return new String(b, StandardCharsets.UTF_8);
        }

        public byte[] bytes() {
            int n = compactLength();
            if (n < 0) {
                return null;
            }
            byte[] b = new byte[n];
            buf.get(b);
            return b;
        }

        public <T> List<T> array(Function<Reader, T> element) {
            int n = compactLength();
            if (n < 0) {
                return null;
            }
            List<T> out = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                out.add(element.apply(this));
            }
            return out;
        }

        /** Skips a tagged-field section (we know no tags; unknown ones are ignorable by definition). */
        public void tags() {
            int count = uvarint();
            for (int i = 0; i < count; i++) {
                uvarint(); // tag
                int size = uvarint();
                need(size);
                buf.position(buf.position() + size);
            }
        }

        public int remaining() {
            return buf.remaining();
        }
    }
}
