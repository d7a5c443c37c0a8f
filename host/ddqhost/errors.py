"""The one host error type: every failure meant for the user derives from HostError.

mpremote's pattern (one `CommandError`, one `except` in `main`): `cli.main` catches HostError,
prints `ddq: message` to stderr and exits with `.code` (1 unless said otherwise; 2 for corruption).
Each module keeps its own subclass so callers can still catch a narrower type.
"""


class HostError(Exception):
    """A failure reported to the user as one line; .code is the exit status."""

    code = 1

    def __init__(self, msg: object = "", code: int | None = None) -> None:
        super().__init__(msg)
        if code is not None:
            self.code = code
