"""See docs/architecture.md ("Layers") for what this layer may and may not do."""
