"""PyInstaller entry script of the frozen app: the same as the ``lookahead-chat`` console script."""

import multiprocessing
import sys

from app.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a frozen child process must not start a second GUI
    sys.exit(main())
