"""X2: `make test` runs the suite on two pytest-xdist workers; what one worker takes at a time.

A file's tests share module-scoped workers, receivers and browsers and run in order, so a file
is one unit; the files that run brokers of their own share one unit, so they never run side by
side on the box's two cores (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from tests.conftest import OWN_BROKER_FILES, pytest_collection_modifyitems, xdist_scope


def test_x2_a_files_tests_are_one_unit_of_work() -> None:
    a = xdist_scope("tests/integration/test_portal_browser.py::test_u3_r3_replay_a_dead_letter")
    b = xdist_scope("tests/integration/test_portal_browser.py::test_u1_operator_sees_every_tenant")
    param = xdist_scope("tests/unit/test_codec.py::test_s4_every_record[Event::x]")
    assert a == b == "tests/integration/test_portal_browser.py"
    assert param == "tests/unit/test_codec.py"
    assert xdist_scope("tests/unit/test_codec.py::test_x") != a


def test_x2_the_files_with_brokers_of_their_own_are_one_unit() -> None:
    scopes = {xdist_scope(f"tests/integration/{name}::test_q1") for name in OWN_BROKER_FILES}
    assert scopes == {"own-brokers"}
    assert len(OWN_BROKER_FILES) == 2
    assert xdist_scope("tests/integration/test_broker_loss.py::test_d1") != "own-brokers"


def test_x2_the_files_with_brokers_of_their_own_start_first_the_rest_keep_their_order() -> None:
    names = ["test_api.py", "test_cluster.py", "test_codec.py", "test_chaos.py", "test_zz.py"]
    items: list[Any] = [SimpleNamespace(path=Path("tests") / name) for name in names]
    pytest_collection_modifyitems(cast(Any, items))
    assert [i.path.name for i in items] == [
        "test_cluster.py",
        "test_chaos.py",
        "test_api.py",
        "test_codec.py",
        "test_zz.py",
    ]
