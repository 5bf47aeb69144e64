"""The operator's console: the plain-text status, the live view, and the per-variant rates it shows."""
