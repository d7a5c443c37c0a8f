"""pytest glue for the shared suite (CPython): import paths and a fresh support.ROOT per test."""

import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

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


def _groups_file(workerinput: dict) -> str:
    """Where a pytest-xdist worker lists the modules that must stay on one worker."""
    name = "ddq-xdist-%s-%s" % (workerinput["testrunuid"], workerinput["workerid"])
    return os.path.join(tempfile.gettempdir(), name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker: list the modules whose tests share a module-scoped fixture (a
    virtual board, a broker, an emulator), for the scheduler below."""
    inp = getattr(config, "workerinput", None)
    if inp is None or not config.getvalue("loadgroup"):  # (xdist sets it in a loadgroup worker)
        return
    mods = set()
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d and d[-1].scope in ("module", "class", "package") for d in defs):
            mods.add(item.nodeid.split("::")[0])
    with open(_groups_file(inp), "w") as f:
        f.write("\n".join(sorted(mods)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadgroup` (`make test-cpython`): every test is a work unit of its own, but a module
    whose tests share a module-scoped fixture is one unit, run in order on one worker, so that
    the fixture starts once and what one test leaves on it is the next one's. (xdist's own
    loadgroup reads xdist_group marks through a nodeid that pytest 9 no longer lets it change.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):  # type: ignore[misc]
        grouped: set[str] = set()

        def add_node_collection(self, node: Any, collection: Any) -> None:
            path = _groups_file(node.workerinput)
            try:
                with open(path) as f:
                    self.grouped = self.grouped | set(f.read().split())
                os.remove(path)
            except OSError:
                pass
            super().add_node_collection(node, collection)

        def _split_scope(self, nodeid: str) -> str:
            mod = nodeid.split("::")[0]
            return mod if mod in self.grouped else nodeid

    return ModuleGroups(config, log)


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
