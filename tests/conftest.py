"""Without a GPU the Triton kernels run under the interpreter. Triton picks interpreter or compiler
when a kernel is decorated, so the variable is set here, before any test module imports one.

Under pytest-xdist, the tests of a module with a module-scoped fixture go to one worker (below)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# pytest-xdist (`make test` runs the suite in three phases, Makefile). A test whose module builds something
# for all its tests (a module-scoped fixture: a stack, servers, Prometheus) stays on one worker with the
# module's other tests, so it is built once, as in a serial run, instead of once per worker that happens
# to get one of them (tests/unit/test_suite_groups.py keeps that true). Without xdist the group marks are
# inert.
SHARED_SCOPES = {"module", "package", "class"}
# Modules paced by model servers under load, waiting for evidence within bounds set for a machine half as
# fast: beside the whole suite their servers' rate falls again, and side-by-side runs lost each of these
# (BENCHMARKS.md, issue 35). Marked `paced`: `make test` runs them after the rest, two at a time (each
# takes about half of the two cores); grouped only as any module is, so that the A/A module's two runs
# can go to two workers and no worker is left alone with a long test at the end.
PACED = frozenset(
    f"tests/integration/{name}.py"
    for name in (
        "test_quality_gate",
        "test_aa_rollout",
        "test_demo",
        "test_observability_live",
        "test_answers_latency",
        "test_answers_third_party",
        "test_up_upstream",
    )
)
# Modules that load the machine to its limit on purpose (Locust against CPU model servers): marked
# `alone`, run last, with nothing beside them.
ALONE = frozenset({"tests/integration/test_load_default_mix.py"})


def shares_a_fixture(item: pytest.Item) -> bool:
    """Whether `item` uses a fixture wider than itself and narrower than the session."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(fixturedef.scope in SHARED_SCOPES for chain in defs for fixturedef in chain)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::")[0]
        if module in ALONE:
            item.add_marker(pytest.mark.alone)
        if module in PACED:
            item.add_marker(pytest.mark.paced)
        if item.get_closest_marker("xdist_group") is None and shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(module))
