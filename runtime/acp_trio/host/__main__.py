"""``python -m acp_trio.host``: one session host process from a config file (see :mod:`acp_trio.host._cli`)."""

from ._cli import main

if __name__ == "__main__":
    main()
