"""`relay run --once` as N processes, each with its share of the relay partitions.

    python -m bench.split_run N P    # N processes over P relay partitions

The drain benchmark runs this as one peer: its wall time covers every process. One
process publishes on one core (its partitions' threads share one interpreter); on a
machine with more cores, processes add cores, as sharing `relay run` processes do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from relay.devenv.cli_runner import relay_command


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or not all(a.isdigit() and int(a) > 0 for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    processes, partitions = int(argv[0]), int(argv[1])
    shares = [range(i, partitions, processes) for i in range(processes)]
    children = [
        subprocess.Popen(
            relay_command(
                "--log-level",
                "WARNING",
                "run",
                "--once",
                "--partitions",
                ",".join(map(str, share)),
            ),
            env=dict(os.environ),
        )
        for share in shares
        if share
    ]
    codes = [child.wait() for child in children]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
