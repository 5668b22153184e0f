"""Running an example as a script with options of its own, locally or on a running cluster.

``_common.run_standalone`` covers the examples whose only options are ``--num-workers`` and
``--num-cpus``; :func:`run_script` adds the example's own options and ``--address`` /
``--temp-dir`` for a cluster started by ``rayfield start``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from _common import prepare_worker_environment

import rayfield as rf


def run_script(
    main: Callable[..., dict[str, Any]],
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    to_kwargs: Callable[[argparse.Namespace], dict[str, Any]],
    argv: list[str] | None = None,
) -> int:
    """Parses the options, starts or joins the runtime, runs ``main``, stops; returns 0 if ok.

    Args:
        main: the example's ``main``, called as ``main(num_workers=..., **to_kwargs(args))``.
        description: the script's help text (its first line is used).
        add_arguments: adds the example's own options to the parser.
        to_kwargs: turns the parsed options into ``main``'s other keyword arguments.
        argv: the options (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 if ``main`` reported ok, 1 if not; 0 on Ctrl-C (a long run stopped).
    """
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-cpus", type=int, default=2, help="of the local runtime")
    parser.add_argument("--address", default=None, help="a cluster's HOST:PORT")
    parser.add_argument("--temp-dir", default=None, help="with --address: the cluster's")
    add_arguments(parser)
    args = parser.parse_args(argv)
    prepare_worker_environment()
    if args.address:
        rf.init(address=args.address, temp_dir=args.temp_dir)
    else:
        # Worker actors hold one CPU each for their lifetime: give every worker one.
        rf.init(num_cpus=max(args.num_cpus, args.num_workers))
    try:
        metrics = main(num_workers=args.num_workers, **to_kwargs(args))
    except KeyboardInterrupt:
        return 0
    finally:
        rf.shutdown()
    return 0 if metrics["ok"] else 1
