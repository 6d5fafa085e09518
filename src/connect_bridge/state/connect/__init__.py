"""The connect group protocol (ConnectGroupHeartbeat): one state class and its steps."""
