"""Where the coordinator's records and the config view are kept and read: file and topic stores."""
