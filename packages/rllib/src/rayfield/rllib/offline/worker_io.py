"""How a rollout worker builds its input reader, output writer and off-policy
estimators from the config keys ``input``, ``shuffle_buffer_size``, ``output``,
``output_config``, ``output_compress_columns``, ``output_max_file_size`` and
``input_evaluation`` (Ray 2: ``off_policy_estimation_methods``)."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.offline.estimators import (
    ImportanceSamplingEstimator,
    OffPolicyEstimator,
    WeightedImportanceSamplingEstimator,
)
from rayfield.rllib.offline.input_reader import InputReader
from rayfield.rllib.offline.io_context import IOContext
from rayfield.rllib.offline.output_writer import NoopOutput, OutputWriter

__all__ = [
    "ESTIMATORS",
    "is_sampler_input",
    "make_estimators",
    "make_input_reader",
    "make_output_writer",
    "make_worker_input",
]

ESTIMATORS: dict[str, type[OffPolicyEstimator]] = {
    "is": ImportanceSamplingEstimator,
    "wis": WeightedImportanceSamplingEstimator,
    "ImportanceSampling": ImportanceSamplingEstimator,
    "WeightedImportanceSampling": WeightedImportanceSamplingEstimator,
}
OUTPUT_FORMATS = ("json", "parquet")


def is_sampler_input(spec: Any) -> bool:
    """Whether ``input`` is the live sampler alone."""
    return isinstance(spec, str) and spec == "sampler"


def make_input_reader(spec: Any, ioctx: IOContext) -> InputReader:
    """The reader of one ``input`` value: ``"sampler"``; a path, glob or list of them
    (`JsonReader`, which reads ``.json`` and ``.parquet`` files); a dict ``{source:
    probability}`` (`MixedInput`); or a function ``f(ioctx) -> InputReader``.

    Raises:
        ValueError: a source that names no file, or a bad mix.
        TypeError: any other kind of value.
    """
    from rayfield.rllib.offline.json_reader import JsonReader
    from rayfield.rllib.offline.mixed_input import MixedInput

    if is_sampler_input(spec):
        return ioctx.default_sampler_input()
    if isinstance(spec, InputReader):
        return spec
    if isinstance(spec, dict):
        return MixedInput(spec, ioctx, make_input_reader)
    if callable(spec):
        return spec(ioctx)
    if isinstance(spec, (str, list, tuple)):
        return JsonReader(spec, ioctx)
    raise TypeError(
        f"input must be 'sampler', a path or glob, a list of them, a dict of sources to "
        f"probabilities or a function returning an InputReader; got {type(spec).__name__}"
    )


def make_worker_input(config: dict[str, Any], ioctx: IOContext) -> InputReader:
    """The worker's reader: ``input``, shuffled over ``shuffle_buffer_size`` batches."""
    from rayfield.rllib.offline.mixed_input import ShuffledInput

    reader = make_input_reader(config.get("input", "sampler"), ioctx)
    size = int(config.get("shuffle_buffer_size") or 0)
    if size > 1:
        seed = config.get("seed")
        reader = ShuffledInput(
            reader, size, None if seed is None else int(seed) + ioctx.worker_index
        )
    return reader


def make_output_writer(config: dict[str, Any], ioctx: IOContext) -> OutputWriter:
    """The writer of ``output``: None (nothing), ``"logdir"`` (the trainer's log
    directory), a directory, or ``f(ioctx) -> OutputWriter``; a directory gets JSON
    lines unless ``output_config["format"]`` is ``"parquet"``.

    Raises:
        ValueError: ``"logdir"`` without a log directory, or an unknown format.
        UnsafeFileError: the directory is not this user's alone.
    """
    from rayfield.rllib.offline.json_writer import JsonWriter

    spec = config.get("output")
    if spec is None:
        return NoopOutput()
    if isinstance(spec, OutputWriter):
        return spec
    if callable(spec):
        return spec(ioctx)
    if spec == "logdir":
        if not ioctx.log_dir:
            raise ValueError("output: 'logdir' needs a trainer log directory")
        spec = ioctx.log_dir
    if not isinstance(spec, str):
        raise TypeError(f"output must be None, 'logdir', a path or a function, got {spec!r}")
    out_cfg = dict(config.get("output_config") or {})
    fmt = str(out_cfg.get("format", "json")).lower()
    max_size = int(config.get("output_max_file_size") or 64 * 1024 * 1024)
    if fmt == "parquet":
        from rayfield.rllib.offline.parquet import ParquetWriter

        return ParquetWriter(spec, ioctx, max_size)
    if fmt != "json":
        raise ValueError(
            f"output_config['format'] must be one of {', '.join(OUTPUT_FORMATS)}, got {fmt!r}"
        )
    return JsonWriter(
        spec,
        ioctx,
        max_size,
        config.get("output_compress_columns", ["obs", "new_obs"]),
        str(out_cfg.get("codec", "lz4")),
    )


def estimator_specs(config: dict[str, Any]) -> tuple[dict[str, type[OffPolicyEstimator]], bool]:
    """``({name: estimator class}, simulation)`` of ``input_evaluation`` (a list of
    ``"is"``, ``"wis"``, ``"simulation"``) or of Ray 2's ``off_policy_estimation_methods``
    (``{name: {"type": "is" | "wis" | a class}}``).

    Raises:
        ValueError: an unknown estimator.
    """
    spec = config.get("input_evaluation") or []
    items: list[tuple[str, Any]]
    if isinstance(spec, dict):
        items = [
            (str(k), (v or {}).get("type", k) if isinstance(v, dict) else v)
            for k, v in spec.items()
        ]
    else:
        items = [(str(s), s) for s in spec]
    out: dict[str, type[OffPolicyEstimator]] = {}
    simulation = False
    for name, kind in items:
        if kind == "simulation":
            simulation = True
        elif isinstance(kind, type) and issubclass(kind, OffPolicyEstimator):
            out[name] = kind
        elif isinstance(kind, str) and kind in ESTIMATORS:
            out[name] = ESTIMATORS[kind]
        else:
            raise ValueError(
                f"unknown off-policy estimator {kind!r}: use 'is', 'wis' or 'simulation' "
                "(or an OffPolicyEstimator subclass)"
            )
    return out, simulation


def make_estimators(config: dict[str, Any], policy: Any) -> list[OffPolicyEstimator]:
    """The estimators of `estimator_specs` for `policy` (none when ``input`` is the
    sampler alone).

    Raises:
        ValueError: an unknown estimator, or a policy without action probabilities.
    """
    if is_sampler_input(config.get("input", "sampler")):
        return []
    specs, _ = estimator_specs(config)
    gamma = float(config.get("gamma", 0.99))
    return [cls(policy, gamma, name) for name, cls in specs.items()]
