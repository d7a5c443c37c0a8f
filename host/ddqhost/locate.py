"""Where ddq lives for the host tools: port/ of this checkout, or the installed modules.

ddq.py and the modules beside it (ddq_outbox for the envelope, ddq_salvage, ...) are imported from
wherever `import ddq` finds them; in a checkout, port/ is put on sys.path first (load_ddq).
"""

import os
import sys
from types import ModuleType

from .errors import HostError

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class DdqNotFound(HostError):
    """ddq (or its source, to install on a device) cannot be found."""


def repo_root() -> str:
    return _REPO


def port_dir() -> str:
    return os.path.join(_REPO, "port")


def load_ddq() -> ModuleType:
    """Import ddq: an installed module, else port/ddq.py of this checkout."""
    try:
        import ddq  # noqa: F401
    except ImportError:
        p = port_dir()
        if os.path.exists(os.path.join(p, "ddq.py")) and p not in sys.path:
            sys.path.insert(0, p)
        try:
            import ddq  # noqa: F401
        except ImportError:
            raise DdqNotFound(
                "cannot import ddq (install the ddq package or run from a checkout)"
            ) from None
    import ddq

    return ddq


def ddq_source() -> str:
    """Path of ddq.py to install on a device."""
    ddq = load_ddq()
    src = getattr(ddq, "__file__", None)
    if not isinstance(src, str) or not src.endswith(".py"):
        raise DdqNotFound("cannot find ddq.py source to install")
    return src


def load_outbox() -> ModuleType:
    """Import ddq_outbox, the message layer beside ddq (the envelope is decoded there only)."""
    load_ddq()  # puts ddq's directory on the path
    import ddq_outbox

    return ddq_outbox


def load_seal() -> ModuleType:
    """Import ddq_seal beside ddq: ddq_outbox's HMAC tags and AES-CTR (SPEC E21-E23)."""
    load_ddq()
    import ddq_seal

    return ddq_seal


def load_window() -> ModuleType:
    """Import ddq_window beside ddq: ddq_outbox's windowed delivery loop (OUTBOX E25)."""
    load_ddq()
    import ddq_window

    return ddq_window


def load_batch() -> ModuleType:
    """Import ddq_batch beside ddq: the readings that share an item (OUTBOX §13.4)."""
    load_ddq()
    import ddq_batch

    return ddq_batch
