"""pytest glue for the shared suite (CPython): import paths and a fresh support.ROOT per test."""

import os
import sys
from collections.abc import Iterator

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_TESTS)
# pyproject's `pythonpath` does the same; this keeps `pytest -c /dev/null tests/...` working.
for _p in (os.path.join(_REPO, "host"), os.path.join(_REPO, "port"), _TESTS):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import support  # noqa: E402  (needs the path above)


@pytest.fixture(autouse=True)
def _support_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Give each test its own support.ROOT, so support.tmpdir() never meets another test's
    files."""
    old = support.ROOT
    support.ROOT = str(tmp_path_factory.mktemp("root"))
    yield
    support.ROOT = old


def pytest_terminal_summary(terminalreporter: "pytest.TerminalReporter") -> None:
    """Say which MQTT broker served the end-to-end tests (tests/brokers.py), if any ran."""
    brokers = sys.modules.get("brokers")
    line = brokers.summary() if brokers is not None else None
    if line:
        terminalreporter.write_line(line)
