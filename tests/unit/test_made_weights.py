"""`make test` makes the tests' trained weights before its phases (GRAYSTACK_TEST_WEIGHTS); a directory
whose training did not finish must not be served as trained."""

from __future__ import annotations

import pytest

from tests.support.shared import DONE
from tests.support.trained import MADE, made_before


def test_unfinished_weights_are_refused_naming_the_variable_and_finished_ones_are_read(tmp_path, monkeypatch):
    monkeypatch.delenv(MADE, raising=False)
    assert made_before() is None  # pytest run by hand: the fixture trains them itself
    monkeypatch.setenv(MADE, str(tmp_path))
    with pytest.raises(RuntimeError, match=f"{MADE}=.*make test-weights"):
        made_before()
    (tmp_path / DONE).touch()
    assert made_before() == tmp_path
