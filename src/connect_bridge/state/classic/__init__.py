"""The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup): one state class and its steps."""
