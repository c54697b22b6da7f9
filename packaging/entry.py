"""PyInstaller entry script of the frozen app: the same as the ``lookahead-chat`` console script."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a frozen child process must not start a second GUI
    if len(sys.argv) > 2 and sys.argv[1] == "-c":
        # `python -c CODE`, as torch's compiler runs it (sys.executable) to check that what it built
        # loads: in the frozen app, sys.executable is the app itself.
        code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == "_compile-step":  # core.runtime.compiled.parallel.CHILD_COMMAND:
        # a decoding step compiled for calibration, in a child (from source the child runs that module itself)
        from core.runtime.compiled.parallel import child_main

        sys.exit(child_main(sys.argv[2:]))
    from app.cli import main

    sys.exit(main())
