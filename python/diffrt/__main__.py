"""python -m diffrt ARGS: the diffrt CLI with ARGS, the one pip installed
inside the package (diffrt.cli_path()), so that the README's main job works
from a pip install:

    python -m diffrt run --model models/diff-v1-tiny --prompt-file models/diff-v1-tiny/prompt.txt

Every command and flag is the CLI's (docs/cli.md); its output and exit status
are the CLI's own (the process becomes the CLI).
"""

import os
import sys

from ._lib import cli_path


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    exe = cli_path()
    if exe is None:
        sys.stderr.write(
            "python -m diffrt: no diffrt executable: this package was not installed with pip "
            "(pip install <checkout>); set DIFFRT_CLI to the path of a built diffrt\n"
        )
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(exe, [exe] + args)
    except OSError as e:
        sys.stderr.write(f"python -m diffrt: cannot run {exe}: {e.strerror}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
