"""A tiny byte-level decoder LM served in two variants: `baseline` (full relative-position bias,
materialized) and `zero-layer` (gated, sparse, and skipped where it is zero)."""
