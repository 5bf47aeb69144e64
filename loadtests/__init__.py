"""Locust load tests for graystack: streaming Messages users, step and soak shapes, and an end-of-run
summary whose verdict (error budget, split against the configured weights) sets Locust's exit code."""
