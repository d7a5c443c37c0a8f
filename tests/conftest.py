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


def pytest_configure(config: pytest.Config) -> None:
    # (pytest-xdist registers it too; a run without xdist then sees no unknown mark)
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """pytest-xdist (`make test-cpython`: -n N --dist loadgroup): the tests of a module that share
    a module-scoped fixture (a virtual board, a broker, an emulator) go to one worker, in order,
    so that it starts once and what one test leaves on it is the next one's; the other tests are
    spread one by one."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d and d[-1].scope in ("module", "class", "package") for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand the brokers this worker started to the controller (the
    tests ran here, the summary line is printed there)."""
    out = getattr(session.config, "workeroutput", None)
    brokers = sys.modules.get("brokers")
    if out is not None and brokers is not None:
        out["ddq_brokers"] = brokers.used()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's controller: add a worker's brokers to this process's count."""
    got = getattr(node, "workeroutput", {}).get("ddq_brokers")
    if got:
        import brokers

        brokers.add_used(got)


def pytest_terminal_summary(terminalreporter: "pytest.TerminalReporter") -> None:
    """Say which MQTT broker served the end-to-end tests (tests/brokers.py), if any ran."""
    brokers = sys.modules.get("brokers")
    line = brokers.summary() if brokers is not None else None
    if line:
        terminalreporter.write_line(line)
