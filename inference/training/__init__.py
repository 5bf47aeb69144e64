"""Train the tiny decoder on real text, derive its zero-layer checkpoints, and measure their quality."""
