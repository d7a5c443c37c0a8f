"""The one host error type: every failure meant for the user derives from HostError.

mpremote's pattern (one `CommandError`, one `except` in `main`): `cli.main` catches HostError,
prints `ddq: message` to stderr and exits with `.code` (1 unless said otherwise; 2 for corruption).
Each module keeps its own subclass so callers can still catch a narrower type. What the host's
own code does not raise as one (an OSError from a file or a device, a ddq.Error from the queue)
becomes one at a single boundary, as_host_error, around the command's handler.
"""

import sys


class HostError(Exception):
    """A failure reported to the user as one line; .code is the exit status."""

    code = 1

    def __init__(self, msg: object = "", code: int | None = None) -> None:
        super().__init__(msg)
        if code is not None:
            self.code = code


def _os_message(e: OSError) -> str:
    where = e.filename if e.filename is not None else ""
    if where:
        return "%s: %s" % (where, e.strerror or e)
    return e.strerror or str(e)


def as_host_error(e: BaseException) -> HostError | None:
    """e as the HostError the user is shown: itself; an OSError as "FILE: strerror"; a ddq.Error
    as "<class in lower case>: message" (exit 2 for Corrupt). None for anything else: a bug,
    whose traceback is the report. ddq is imported lazily, so its errors are known only once it
    is loaded."""
    if isinstance(e, HostError):
        return e
    if isinstance(e, OSError):
        return HostError(_os_message(e))
    ddq = sys.modules.get("ddq")
    if ddq is not None and isinstance(e, getattr(ddq, "Error", ())):
        name = type(e).__name__
        return HostError("%s: %s" % (name.lower(), str(e) or name), 2 if name == "Corrupt" else 1)
    return None
