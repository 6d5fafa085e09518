"""Converting a group between the classic and the connect protocol."""
