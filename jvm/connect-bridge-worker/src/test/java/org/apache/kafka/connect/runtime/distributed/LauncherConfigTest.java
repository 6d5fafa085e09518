package org.apache.kafka.connect.runtime.distributed;

import io.connectbridge.connect.BridgeMemberSettings;
import io.connectbridge.connect.BridgeMemberSettings.GroupProtocol;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.connect.errors.ConnectException;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LauncherConfigTest {
    static Map<String, String> base() {
        Map<String, String> p = new HashMap<>();
        p.put("bootstrap.servers", "localhost:9092");
        p.put("group.id", "connect-cluster");
        p.put("group.instance.id", "w1");
        p.put("connect.bridge.assignment", "server");
        return p;
    }

    @Test
    void classicOrUnsetLeavesThePropertiesUntouched() {
        Map<String, String> unset = base();
        BridgeMemberSettings.Split split = BridgeMemberSettings.split(unset);
        assertEquals(GroupProtocol.CLASSIC, split.settings().protocol());
        assertSame(unset, split.workerProps());
        Map<String, String> classic = base();
        classic.put("group.protocol", "classic");
        assertSame(classic, BridgeMemberSettings.split(classic).workerProps());
    }

    @Test
    void connectStripsTheMembershipKeys() {
        Map<String, String> p = base();
        p.put("group.protocol", "connect");
        p.put("group.remote.assignor", "connect-cooperative");
        BridgeMemberSettings.Split split = BridgeMemberSettings.split(p);
        assertEquals(GroupProtocol.CONNECT, split.settings().protocol());
        assertEquals("w1", split.settings().instanceId());
        assertEquals("connect-cooperative", split.settings().serverAssignor());
        assertTrue(split.workerProps().keySet().stream().noneMatch(k -> k.startsWith("group.protocol")
            || k.equals("group.instance.id") || k.equals("group.remote.assignor") || k.startsWith("connect.bridge.")));
        assertEquals("connect-cluster", split.workerProps().get("group.id"));
        assertEquals("connect", p.get("group.protocol"), "the caller's map is not changed");
    }

    @Test
    void connectRefusesWhatItCannotDo() {
        for (Map.Entry<String, String> bad : Map.of("connect.protocol", "eager", "exactly.once.source.support",
            "enabled", "connect.bridge.assignment", "both").entrySet()) {
            Map<String, String> p = base();
            p.put("group.protocol", "connect");
            p.put(bad.getKey(), bad.getValue());
            ConfigException e = assertThrows(ConfigException.class, () -> BridgeMemberSettings.split(p));
            assertTrue(e.getMessage().contains(bad.getKey()), e.getMessage());
        }
        Map<String, String> p = base();
        p.put("group.protocol", "consumer");
        assertThrows(ConfigException.class, () -> BridgeMemberSettings.split(p));
    }

    @Test
    void clientSideAssignmentIsChosenWithConnectBridgeAssignment() {
        Map<String, String> p = base();
        p.put("group.protocol", "connect");
        assertFalse(BridgeMemberSettings.split(p).settings().clientAssignment(), "server is the default");
        p.put("connect.bridge.assignment", "client");
        BridgeMemberSettings.Split split = BridgeMemberSettings.split(p);
        assertTrue(split.settings().clientAssignment());
        assertFalse(split.workerProps().containsKey("connect.bridge.assignment"));
    }

    @Test
    void theHerderConstructorIsFoundOn431AndOtherLinesAreRefused() {
        assertDoesNotThrow(() -> BridgeHerders.checkSupported());
        assertThrows(ConnectException.class, () -> BridgeHerders.checkSupported("4.4.0"));
        assertThrows(ConnectException.class, () -> BridgeHerders.checkSupported("3.9.1"));
    }
}
