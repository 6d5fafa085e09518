package io.connectbridge.connect.wire;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

import java.io.InputStream;
import java.lang.reflect.RecordComponent;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * Golden vectors written by the Python codec (tests/gen_java_vectors.py): every body decodes to the
 * same fields and encodes back to the same bytes.
 */
class ConnectGroupWireTest {
    private static final HexFormat HEX = HexFormat.of();

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> vectors() throws Exception {
        try (InputStream in = ConnectGroupWireTest.class.getResourceAsStream("/connect-group-vectors.json")) {
            return new ObjectMapper().readValue(in, List.class);
        }
    }

    @TestFactory
    Stream<DynamicTest> everyVectorDecodesAndEncodesBack() throws Exception {
        return vectors().stream().map(v -> DynamicTest.dynamicTest((String) v.get("name"), () -> {
            byte[] body = HEX.parseHex((String) v.get("hex"));
            int apiKey = ((Number) v.get("api_key")).intValue();
            Object message = (Boolean) v.get("request")
                ? ConnectGroupWire.decodeRequest(apiKey, ByteBuffer.wrap(body))
                : ConnectGroupWire.decodeResponse(apiKey, ByteBuffer.wrap(body));
            assertEquals(normalise(v.get("fields")), plain(message));
            assertArrayEquals(body, ConnectGroupWire.encode(message));
        }));
    }

    @Test
    void truncatedAndTrailingBytesAreRejected() throws Exception {
        Map<String, Object> v = vectors().get(0);
        byte[] body = HEX.parseHex((String) v.get("hex"));
        byte[] shorter = java.util.Arrays.copyOf(body, body.length - 3);
        assertThrows(WireFormatException.class, () -> ConnectGroupWire.decodeRequest(1000, ByteBuffer.wrap(shorter)));
        byte[] longer = java.util.Arrays.copyOf(body, body.length + 1);
        assertThrows(WireFormatException.class, () -> ConnectGroupWire.decodeRequest(1000, ByteBuffer.wrap(longer)));
    }

    /** A record as the vectors spell it: snake_case names, numbers as longs, bytes as {"hex": ...}. */
    static Object plain(Object value) throws Exception {
        if (value == null) {
            return null;
        }
        if (value instanceof byte[] b) {
            return Map.of("hex", HEX.formatHex(b));
        }
        if (value instanceof Number n) {
            return n.longValue();
        }
        if (value instanceof List<?> list) {
            List<Object> out = new ArrayList<>();
            for (Object o : list) {
                out.add(plain(o));
            }
            return out;
        }
        if (value.getClass().isRecord()) {
            Map<String, Object> out = new LinkedHashMap<>();
            for (RecordComponent c : value.getClass().getRecordComponents()) {
                out.put(snake(c.getName()), plain(c.getAccessor().invoke(value)));
            }
            return out;
        }
        return value;
    }

    @SuppressWarnings("unchecked")
    static Object normalise(Object value) {
        if (value instanceof Number n) {
            return n.longValue();
        }
        if (value instanceof List<?> list) {
            return list.stream().map(ConnectGroupWireTest::normalise).toList();
        }
        if (value instanceof Map<?, ?> map) {
            Map<String, Object> out = new LinkedHashMap<>();
            ((Map<String, Object>) map).forEach((k, x) -> out.put(k, normalise(x)));
            return out;
        }
        return value;
    }

    static String snake(String camel) {
        StringBuilder b = new StringBuilder();
        for (char ch : camel.toCharArray()) {
            if (Character.isUpperCase(ch)) {
                b.append('_').append(Character.toLowerCase(ch));
            } else {
                b.append(ch);
            }
        }
        return b.toString();
    }
}
