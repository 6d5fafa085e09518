"""See DESIGN.md section 2 for what this layer may and may not do."""
