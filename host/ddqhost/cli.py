"""Command line entry point `ddq` (minimal placeholder; the host tools replace it)."""

import sys


def main(argv: list[str] | None = None) -> int:
    """Print `ddq <version>` for --version; everything else is not written yet."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--version"]:
        import ddq

        print("ddq %s" % ddq.__version__)
        return 0
    print("usage: ddq --version", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
