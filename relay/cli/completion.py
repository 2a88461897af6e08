"""`relay completion bash|zsh|fish`: the shell's completion script for `relay` (argcomplete).

eval "$(relay completion bash)"     # in ~/.bashrc; zsh: the same with zsh
relay completion fish | source      # in ~/.config/fish/config.fish
"""

from __future__ import annotations

import argparse
from typing import Any

import argcomplete
from argcomplete.shell_integration import shellcode

SHELLS = ("bash", "zsh", "fish")


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction
    parser = subparsers.add_parser(
        "completion",
        help='print the shell completion script: eval "$(relay completion bash)"',
    )
    parser.add_argument("shell", choices=SHELLS, help="bash, zsh or fish")
    parser.set_defaults(handler=_completion)


def _completion(args: argparse.Namespace) -> int:
    print(shellcode(["relay"], shell=args.shell), end="")
    return 0


def complete(parser: argparse.ArgumentParser) -> None:
    """When the shell asks for completions (``_ARGCOMPLETE`` set), print them and exit;
    otherwise nothing."""
    argcomplete.autocomplete(parser)
