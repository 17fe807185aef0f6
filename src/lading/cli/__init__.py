"""The ``lading`` command: argparse subcommands that call the library and print its answers.

One module per command group holds its commands and parsers: :mod:`lading.cli.stores`,
:mod:`lading.cli.data`, :mod:`lading.cli.train`, :mod:`lading.cli.lm`, :mod:`lading.cli.bench`,
:mod:`lading.cli.example`. None imports torch at the top, so building the parser (and ``lading
lm build``, ``lading repartition``) stays light.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from lading import __version__
from lading.cli.bench import add_bench, bench_plan, default_world_sizes
from lading.cli.data import add_repartition, add_synth
from lading.cli.example import add_example
from lading.cli.lm import add_lm
from lading.cli.stores import add_store_commands, describe
from lading.cli.train import add_rerank, add_run_args, add_train

__all__ = [
    "add_run_args",
    "bench_plan",
    "build_parser",
    "default_world_sizes",
    "describe",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lading`` command."""
    parser = argparse.ArgumentParser(
        prog="lading",
        description="Move training data from disk to RAM to GPU without a copy per process.",
    )
    parser.add_argument("--version", action="version", version=f"lading {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    add_store_commands(sub)
    add_train(sub)
    add_lm(sub)
    add_bench(sub)
    add_repartition(sub)
    add_rerank(sub)
    add_synth(sub)
    add_example(sub)
    _record_flags(parser)
    _say_defaults(parser)
    return parser


def _say_defaults(parser: argparse.ArgumentParser) -> None:
    """Add ``(default: VALUE)`` to the help of every option of ``parser`` and its
    subcommands that has a value by default and whose help does not already say it (in
    words, or as ``(VALUE`` as many do); a user reads what a run does without the flag."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _say_defaults(sub)
            continue
        value, text = action.default, action.help
        if not action.option_strings or text is None or text == argparse.SUPPRESS:
            continue
        if value in (None, argparse.SUPPRESS, [], ()) or isinstance(value, bool):
            continue
        if "%(default)" in text or "default" in text or f"({value}" in text:
            continue
        action.help = f"{text} (default: %(default)s)"


def run() -> NoReturn:
    """The ``lading`` command as a process runs it (``lading``, ``python -m lading``): exits with
    :func:`main`'s status. A process that joined and left a process group (a training command
    under torchrun) exits without finalizing the interpreter, once its exit hooks have run and
    its output is flushed: the group's threads outlive it and one can abort the finalizing
    process (:func:`lading.train.ddp.left_a_group`). So does one whose command raised after
    leaving its group: the traceback is printed as Python prints it, and the status is 1 (130
    for an interrupt). Objects are not finalized then; every file the commands write is closed
    before they return."""
    try:
        code = main()
    except BaseException as e:
        if not _left_a_group():
            raise
        code = _raised(e)
    if _left_a_group():
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    raise SystemExit(code)


def _left_a_group() -> bool:
    ddp = sys.modules.get("lading.train.ddp")  # not imported: no group was joined
    return ddp is not None and bool(ddp.left_a_group())


def _raised(error: BaseException) -> int:
    """The exit status of a command that raised ``error``, its traceback printed as the
    interpreter would (a ``SystemExit`` keeps its own status and prints nothing)."""
    if isinstance(error, SystemExit):
        code = error.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    traceback.print_exception(error)
    return 130 if isinstance(error, KeyboardInterrupt) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lading`` command; errors lading raises on purpose print as one line."""
    from lading.errors import LadingError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C in a command with no word of its own (build has one)
        print(f"{getattr(args, '_prog', f'lading {args.command}')}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`lading inspect STORE | head -1`): as the Python docs advise,
        # point stdout at devnull so the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (LadingError, OSError, ImportError, ValueError) as e:
        line = str(e)
        if isinstance(e, OSError) and not isinstance(e, LadingError):
            line = os_error_line(e)  # (a bare "[Errno 13] ..." becomes path, cause and fix)
            if not line:
                raise
        flags = getattr(args, "_flags", {})
        command = getattr(args, "_prog", f"lading {args.command}")  # "lading lm build"
        print(f"{command}: {cli_spelling(line, flags)}", file=sys.stderr)
        return 2


_FIXES = {  # what a user does about an OS error on a path they named
    errno.EACCES: "Permission denied; choose a destination you may write to, or change its "
    "permissions",
    errno.EPERM: "Operation not permitted; choose a destination you may write to",
    errno.EROFS: "the file system is read-only; choose a destination on a writable one",
    errno.ENOTDIR: "a part of this path is a file, not a folder; choose another path",
    errno.EISDIR: "is a folder where a file is needed; name a file",
    errno.ENOENT: "no such file or folder; check the path",
    errno.ENOSPC: "no space left on the device; free some or choose another disk",
    errno.EDQUOT: "the disk quota is used up; free some or choose another disk",
}


def os_error_line(e: OSError) -> str:
    """The one line for an OS error on a user's path: lading's own message where it wrote one,
    else the path, the cause and the fix; "" for an error that is not about a path the user
    can change (a bug: the traceback is kept)."""
    if not str(e).startswith("[Errno"):
        return str(e)
    path = e.filename
    if path is None or e.errno not in (*_FIXES, errno.EEXIST):
        return ""
    if e.errno == errno.EEXIST:  # (a makedirs through a path whose part is a file)
        if not os.path.isfile(path):
            return ""
        return f"{path} is a file, not a folder; choose another destination or move the file"
    return f"{path}: {_FIXES[e.errno]}"


_KEYWORD = re.compile(
    r"\b([a-z_]+)=(?:'([^']*)'|\"([^\"]*)\"|(True|False|None|-?\d+(?:\.\d+)?)|(?=[\s,;)]|$))"
)
# an API object spelled for Python (``parse=ParseOptions(...)``), with the "or" that joins it
# to the flag the message names beside it
_API_CALL = re.compile(r"\b([a-z_]+)=[A-Z]\w*\(")
_SAID_TWICE = re.compile(r"(--[a-z][\w-]*) \(\1\)")  # "--tokenizer (--tokenizer)"
_SAID_TWICE_WHERE = re.compile(r"(--[a-z][\w-]*) \(\1, ")  # "--x (--x, in lading rerank)"
_PAIR_TWICE = re.compile(r"\((--[a-z][\w-]*(?: [^\s,()]+)?), \1\)")  # "(--clip 1, --clip 1)"
# a library keyword whose False is a ``--no-...`` flag of another name (the flag's dest)
_NEGATED = {"append_eos": "no_eos"}


def cli_spelling(message: str, flags: dict[str, str]) -> str:
    """``message`` in the command's flag spellings (``flags``: argparse dest -> option string).

    Library messages name a setting the API's way (``on_error='skip'``, ``tokenizer=``), often
    with the flag beside it (``pass tokenizer= (--tokenizer) too``); at the command line:

    - a keyword that is a flag of this command is written as the flag (``--on-error skip``;
      ``overwrite=True`` and a bare ``tokenizer=``: the flag alone), a boolean's ``False`` as
      the ``--no-...`` flag that means it (``append_eos=False``: ``--no-eos``;
      ``prefetch=False``: ``--no-prefetch``), ``True`` of ``--narrow/--no-narrow`` as
      ``--narrow`` (the keys ``"dest=True"``, ``"dest=False"`` of ``flags``);
    - a bare name with an underscore that is a flag (``leave max_length out``) as the flag;
    - an API object that is not a flag (``parse=ParseOptions(columns=(...))``) is dropped,
      with the "or" that joins it to the flag named beside it;
    - a flag then named twice (``--tokenizer (--tokenizer)``, ``--x (--x, in lading rerank)``)
      is named once.

    Other text (other keywords, names in paths or quotes) is left as it is.
    """

    def flag(match: re.Match[str]) -> str:
        name = match.group(1)
        value = next((v for v in match.groups()[1:] if v is not None), None)
        if f"{name}={value}" in flags:  # a boolean flag's spelling of True or False
            return flags[f"{name}={value}"]
        if value == "False" and _NEGATED.get(name, f"no_{name}") in flags:
            return flags[_NEGATED.get(name, f"no_{name}")]
        if name not in flags:
            return match.group(0)
        if value is None or value == "True":  # "pass format= one of …": the bare flag
            return flags[name]
        return f"{flags[name]} {value}"

    message = _drop_api_calls(message, flags)
    message = _KEYWORD.sub(flag, message)
    for name, option in flags.items():
        if "_" in name and "=" not in name:  # (a plain word such as "tokenizer" may be prose)
            message = re.sub(rf"(?<![\w/.'\"=-]){name}(?![\w/.'\"=-])", option, message)
    once = _SAID_TWICE_WHERE.sub(r"\1 (", _SAID_TWICE.sub(r"\1", message))
    return _PAIR_TWICE.sub(r"(\1)", once)


def _drop_api_calls(message: str, flags: dict[str, str]) -> str:
    """``message`` without its ``name=Object(...)`` spellings whose name is not a flag, each
    with the "or" joining it to its neighbour, and without the empty parentheses left."""
    while True:
        found = next((m for m in _API_CALL.finditer(message) if m.group(1) not in flags), None)
        if found is None:
            return message
        depth, end = 0, found.end() - 1
        for end in range(found.end() - 1, len(message)):
            depth += {"(": 1, ")": -1}.get(message[end], 0)
            if depth == 0:
                break
        before, after = message[: found.start()], message[end + 1 :]
        joined = re.match(r",?\s+or\s+", after)
        if joined:
            after = after[joined.end() :]
        else:
            before = re.sub(r",?\s+or\s+$", "", before)
        if before.endswith("(") and after.startswith(")"):
            before, after = before[:-1].rstrip(), after[1:]
        message = before + after


def _record_flags(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand's namespace ``_flags`` (dest -> its long option; a boolean's
    ``"dest=True"`` / ``"dest=False"`` -> the option that sets it so), so errors can name the
    flag the user typed (see :func:`cli_spelling`), and ``_prog``, the command's whole name
    (``lading lm build``), which begins its error lines."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _record_flags(sub)
    flags = {}
    for a in parser._actions:
        if not a.option_strings or a.dest in ("help", "version"):
            continue
        longest = max(a.option_strings, key=len)
        if isinstance(a, argparse.BooleanOptionalAction):  # --narrow / --no-narrow
            yes = next(o for o in a.option_strings if not o.startswith("--no-"))
            flags.update({a.dest: yes, f"{a.dest}=True": yes, f"{a.dest}=False": longest})
        elif isinstance(a, argparse._StoreFalseAction):  # --no-prefetch: prefetch=False
            flags[f"{a.dest}=False"] = longest
        else:
            flags[a.dest] = longest
    # the innermost (sub)command's defaults are the last set; its prog is its whole name
    parser.set_defaults(_flags=flags, _prog=parser.prog)
