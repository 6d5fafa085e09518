"""Proxy mode, the server's side: which requests are relayed, and the per-broker listeners."""
