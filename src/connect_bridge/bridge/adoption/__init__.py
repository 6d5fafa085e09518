"""Taking running groups over from the upstream coordinator, and handing them back."""
