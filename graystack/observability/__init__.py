"""Grafana dashboards and Prometheus alert rules as code.

`python -m graystack.observability` (`make dashboards`) writes them where the Helm chart reads them:
charts/graystack/files/dashboards/<name>.json and charts/graystack/files/prometheus/alerts.yml. The
files are committed; tests/unit/test_dashboards.py fails when they differ from what this code builds.
Metric names come from gateway/families.py and inference/families.py (docs/architecture.md); the unit tests
check that every `graystack_*` family a query reads is exported by a part's telemetry.py.
"""
