"""Adopting a group from the upstream coordinator, and handing it back."""
