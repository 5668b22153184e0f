"""The ``rllib`` command: ``rllib train`` and ``rllib rollout`` (``rllib evaluate``).

``rllib train`` runs one trial in this process (the workers on the cluster) and
writes ``params.json``, ``result.json`` (one JSON line per iteration), ``progress.csv``
and a TensorBoard event file under ``<local-dir>/<experiment-name>/<RUN>_<ENV>_<date>/``
(`rayfield.rllib.result_files`), with checkpoints beside them: one at the end unless
``--no-checkpoint-at-end``, and its ``rllib evaluate`` command is printed. The
directories it makes are 0700 and its files 0600 (`rayfield.util.private_files`). A run
that needs Tune (``--num-samples > 1``, a Tune-only flag, a search space in the config)
goes to `rayfield.rllib.tune_runner` instead, whose loggers write the same files.

``rllib evaluate`` (or ``rollout``) rebuilds the algorithm from a checkpoint and runs its
policy; ``--render`` renders the env and ``--out`` writes the episodes as offline data
(JSON lines, `rayfield.rllib.offline`), which any algorithm can train on. It writes
nothing else: the checkpoint's ``output`` setting is dropped, so no log directory is made.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from rayfield.rllib import tune_runner
from rayfield.rllib.agents.registry import ALGORITHMS
from rayfield.rllib.env.registry import BUILTIN_ENVS
from rayfield.util import private_files


def _json_arg(value: str | None, name: str) -> dict[str, Any]:
    if not value:
        return {}
    try:
        out = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=name) from None
    if not isinstance(out, dict):
        raise click.BadParameter("must be a JSON object", param_hint=name)
    return out


def _lookup(result: dict[str, Any], key: str) -> Any:
    value: Any = result
    for part in key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def should_stop(result: dict[str, Any], stop: dict[str, Any]) -> bool:
    """Tune's stop rule: any criterion whose result value reached its threshold.

    Raises:
        click.UsageError: a criterion names a key the result does not have.
    """
    for key, threshold in stop.items():
        value = _lookup(result, key)
        if value is None:
            raise click.UsageError(f"stop criterion {key!r} is not a result key")
        if isinstance(value, (int, float)) and not math.isnan(value) and value >= threshold:
            return True
    return False


def _connect(address: str | None, temp_dir: str | None, options: dict[str, Any]) -> None:
    """Join ``address``, or start a local runtime when ``options`` (``--ray-num-cpus``,
    ``--ray-num-gpus``, ``--ray-object-store-memory``) asks for one."""
    import rayfield

    if address:
        rayfield.init(address=address, temp_dir=temp_dir)
    elif options:
        from rayfield.rllib.utils import preload

        rayfield.init(**preload.init_options(), **options)


def _experiments_from_file(path: str) -> dict[str, Any]:
    import yaml

    with open(path) as f:
        spec = yaml.safe_load(f)
    if not isinstance(spec, dict) or not spec:
        raise click.UsageError(f"{path}: expected a mapping of experiment names to specs")
    return spec


@click.group()
def cli() -> None:
    """Train and evaluate reinforcement learning algorithms (rayfield-rllib)."""


@cli.command()
@click.option(
    "--run",
    "--algo",
    "-r",
    "-a",
    "run",
    help=f"Algorithm: {', '.join(ALGORITHMS)}.",
)
@click.option(
    "--env",
    "-e",
    help="A gymnasium id, a name given to register_env, or a built-in multi-agent env "
    f"({', '.join(BUILTIN_ENVS)}).",
)
@click.option("--config", "-c", "config_json", default="{}", help="Config overrides (JSON).")
@click.option(
    "--stop",
    "-s",
    "stop_json",
    default="{}",
    help="Stop criteria, e.g. '{\"episode_reward_mean\": 450}'.",
)
@click.option(
    "--checkpoint-freq",
    default=0,
    show_default=True,
    help="Iterations between checkpoints (0: none).",
)
@click.option(
    "--checkpoint-at-end/--no-checkpoint-at-end",
    default=True,
    show_default=True,
    help="Checkpoint after the last iteration.",
)
@click.option("--local-dir", default="~/ray_results", show_default=True, help="Where results go.")
@click.option("--experiment-name", "-n", default="default", show_default=True)
@click.option(
    "--num-samples", default=1, show_default=True, help="Trials (more than 1 runs with Tune)."
)
@click.option("--restore", default=None, help="Checkpoint to resume from.")
@click.option("--config-file", "-f", default=None, help="A YAML experiment spec (tuned example).")
@click.option(
    "--ray-address",
    "--redis-address",
    "--address",
    "address",
    default=None,
    help="Cluster to join.",
)
@click.option("--ray-num-cpus", type=int, default=None, help="CPUs for a local cluster.")
@click.option("--ray-num-gpus", type=int, default=None, help="GPUs for a local cluster.")
@click.option(
    "--ray-object-store-memory", type=int, default=None, help="Object store bytes (local cluster)."
)
@click.option("--temp-dir", default=None, help="With --ray-address: the cluster's --temp-dir.")
@click.option("-v", "verbose", count=True, help="-v: INFO logging, -vv: DEBUG.")
@tune_runner.tune_options
def train(
    run: str | None,
    env: str | None,
    config_json: str,
    stop_json: str,
    checkpoint_freq: int,
    checkpoint_at_end: bool,
    local_dir: str,
    experiment_name: str,
    num_samples: int,
    restore: str | None,
    config_file: str | None,
    address: str | None,
    ray_num_cpus: int | None,
    ray_num_gpus: int | None,
    ray_object_store_memory: int | None,
    temp_dir: str | None,
    verbose: int,
    **tune_flags: Any,
) -> None:
    """Train an algorithm until a stop criterion is met.

    One trial runs in this process; with --num-samples > 1, a Tune-only flag, or a
    grid_search in the config, the experiment runs through rayfield-tune instead."""
    spec_flags = tune_runner.spec_flags(
        tune_flags, _json_arg(tune_flags["resources_json"], "--resources-per-trial")
    )
    if config_file:
        experiments = _experiments_from_file(config_file)
        for spec in experiments.values():  # flags given on the command line fill in
            spec.setdefault("local_dir", local_dir)
            spec.setdefault("checkpoint_freq", checkpoint_freq)
            spec.setdefault("checkpoint_at_end", checkpoint_at_end)
            for key, value in spec_flags.items():
                spec.setdefault(key, value)
    else:
        experiments = {
            experiment_name: {
                "run": run,
                "env": env,
                "config": _json_arg(config_json, "--config"),
                "stop": _json_arg(stop_json, "--stop"),
                "checkpoint_freq": checkpoint_freq,
                "checkpoint_at_end": checkpoint_at_end,
                "num_samples": num_samples,
                "restore": restore,
                "local_dir": local_dir,
                **spec_flags,
            }
        }
    options = {
        k: v
        for k, v in (
            ("num_cpus", ray_num_cpus),
            ("num_gpus", ray_num_gpus),
            ("object_store_memory", ray_object_store_memory),
        )
        if v is not None
    }
    reason = tune_runner.tune_reason(experiments, tune_runner.flags_given(tune_flags))
    if reason is not None:
        tune = tune_runner.import_tune()
        if tune is None:
            raise click.UsageError(
                f"{reason} runs through Tune, which is not installed: {tune_runner.INSTALL_HINT}"
            )
        if address:
            _connect(address, temp_dir, {})
        tune_runner.run_with_tune(
            tune,
            experiments,
            scheduler=tune_flags["scheduler"],
            scheduler_config=_json_arg(tune_flags["scheduler_json"], "--scheduler-config"),
            resume=bool(tune_flags["resume"]),
            queue_trials=bool(tune_flags["queue_trials"]),
            verbose=verbose,
            init_options=options,
        )
        return
    _connect(address, temp_dir, options)
    for name, spec in experiments.items():
        _run_experiment(name, spec, verbose)


def _run_experiment(name: str, spec: dict[str, Any], verbose: int) -> None:
    from rayfield.rllib.agents.registry import get_trainer_class
    from rayfield.rllib.result_files import LogDir, ResultFiles, evaluate_command

    run, env, config = tune_runner.experiment_basics(spec, verbose)
    config["env"] = env
    stop = dict(spec.get("stop") or {})
    freq = int(spec.get("checkpoint_freq", 0))
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    root = Path(os.path.expanduser(spec.get("local_dir") or "~/ray_results")) / name
    trial_dir = root / f"{run}_{env}_{stamp}"
    start = time.time()
    try:
        # the trial directory is the trainer's log dir (output: "logdir" writes there)
        trainer = get_trainer_class(run)(
            config=config, logger_creator=lambda _config: LogDir(str(trial_dir))
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        from rayfield.rllib.agents.checkpoints import to_json_safe

        try:
            private_files.ensure_private_dir(trial_dir, what="the trial directory")
            private_files.write_json(
                trial_dir / "params.json", to_json_safe(trainer.config), indent=1
            )
            if spec.get("restore"):
                trainer.restore(spec["restore"])
        except FileNotFoundError as exc:
            raise click.UsageError(str(exc)) from None
        except private_files.UnsafeFileError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"trial dir {trial_dir}; start-up {time.time() - start:.2f} s")
        checkpoint = None
        files = ResultFiles(trial_dir)
        try:
            while True:
                result = trainer.train()
                files.write(result)
                it = result["training_iteration"]
                click.echo(
                    f"iter {it} time {time.time() - start:.1f}s steps {result['timesteps_total']} "
                    f"episodes {result['episodes_total']} "
                    f"reward {result['episode_reward_mean']:.2f}"
                )
                done = should_stop(result, stop)
                if freq and it % freq == 0:
                    checkpoint = trainer.save(str(trial_dir))
                if done:
                    break
            at_end = spec.get("checkpoint_at_end", True)
            if at_end and (checkpoint is None or not checkpoint.endswith(f"-{it}")):
                checkpoint = trainer.save(str(trial_dir))
        finally:
            files.close()
        click.echo(
            f"done: {time.time() - start:.1f} s wall, {result['timesteps_total']} env steps, "
            f"episode_reward_mean {result['episode_reward_mean']:.2f}"
        )
        if checkpoint:
            click.echo(f"checkpoint: {checkpoint}")
            click.echo(f"evaluate with: {evaluate_command(checkpoint, run, env)}")
    finally:
        trainer.stop()


@cli.command()
@click.argument("checkpoint")
@click.option(
    "--run", "--algo", "-r", "run", default=None, help="Algorithm (default: the checkpoint's)."
)
@click.option("--env", "-e", default=None, help="Env (default: the checkpoint's).")
@click.option("--steps", default=10000, show_default=True, help="Stop after this many env steps.")
@click.option(
    "--episodes", default=0, show_default=True, help="Stop after this many episodes (0: no limit)."
)
@click.option(
    "--render/--no-render",
    default=False,
    help="Render the env at each step (a gymnasium id is made with render_mode='human').",
)
@click.option(
    "--out",
    default=None,
    help="Write the episodes as offline data (JSON lines any algorithm can train on; "
    "0600): DIR for output-*.json files, or FILE.json. Multi-agent: one JSON list of "
    "[obs, actions, next_obs, rewards, done] rows per episode.",
)
@click.option("--config", "-c", "config_json", default="{}", help="Config overrides (JSON).")
@click.option(
    "--explore", is_flag=True, help="Sample actions instead of taking the most likely one."
)
@click.option(
    "--policy-mapping-fn",
    default=None,
    help="Multi-agent: MODULE:FUNCTION mapping an agent id to a policy id (default: the "
    "agent's own id if it names a policy, else the only policy).",
)
def rollout(
    checkpoint: str,
    run: str | None,
    env: str | None,
    steps: int,
    episodes: int,
    render: bool,
    out: str | None,
    config_json: str,
    explore: bool,
    policy_mapping_fn: str | None,
) -> None:
    """Run a trained policy from a checkpoint and print each episode's reward.

    A multi-agent checkpoint is run with all its policies: each agent acts with the
    policy ``--policy-mapping-fn`` names (checkpoints record the training mapping
    function by name only and never import it)."""
    from rayfield.rllib.agents import checkpoints
    from rayfield.rllib.agents.registry import get_trainer_class

    try:
        _, algo_state = checkpoints.read(checkpoint)
    except FileNotFoundError as exc:
        raise click.UsageError(str(exc)) from None
    except private_files.UnsafeFileError as exc:
        raise click.ClickException(str(exc)) from None
    config = checkpoints.drop_unserializable(algo_state["config"])
    config.update(_json_arg(config_json, "--config"))
    config["num_workers"] = 0
    config["evaluation_interval"] = None
    # the trainer only acts: no experience output, so no log dir (``output: "logdir"``
    # made one in ~/ray_results); the episodes go to --out
    config["output"] = None
    if env:
        config["env"] = env
    multiagent = config.get("multiagent") or {}
    mapping = None
    if multiagent.get("policies"):
        recorded = checkpoints.unserializable_name(
            (algo_state["config"].get("multiagent") or {}).get("policy_mapping_fn")
        )
        mapping = _mapping_fn(policy_mapping_fn, list(multiagent["policies"]), recorded)
        config["multiagent"] = {**multiagent, "policy_mapping_fn": mapping}
    start = time.time()
    try:
        trainer = get_trainer_class(run or algo_state["algorithm"])(config=config)
    except (ValueError, KeyError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        trainer.restore(checkpoint)
        env_obj = _make_env(trainer, config, render)
        seed = config.get("seed")
        from rayfield.rllib.env.multi_agent_env import MultiAgentEnv

        if mapping is None and isinstance(env_obj, MultiAgentEnv):
            mapping = _default_policy_mapping  # every agent (or group) to the one policy
        if mapping is not None:
            _rollout_multi_agent(trainer, env_obj, mapping, steps, episodes, explore, out, seed)
            return
        from rayfield.rllib.rollout_episodes import make_rollout_writer, run_episodes

        try:
            writer = make_rollout_writer(out)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        except private_files.UnsafeFileError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            rewards, total_steps = run_episodes(
                trainer, env_obj, steps, episodes, explore, seed, writer, render, click.echo
            )
        finally:
            writer.close()
        _finish_rollout(rewards, total_steps, start, None, [])
    finally:
        trainer.stop()


def _make_env(trainer: Any, config: dict[str, Any], render: bool) -> Any:
    """The env to roll out in; with `render`, a gymnasium id is made with
    ``render_mode="human"`` (other envs render as they are built to)."""
    from rayfield.rllib.env.env_context import EnvContext

    env_id = config.get("env")
    if render and isinstance(env_id, str):
        import gymnasium as gym

        if env_id in gym.registry:
            return gym.make(env_id, render_mode="human")
    return trainer.env_creator(EnvContext(config.get("env_config")))


def _mapping_fn(spec: str | None, policy_ids: list[str], recorded: str | None) -> Any:
    """The agent -> policy mapping of a multi-agent rollout (see `rollout`)."""
    if spec:
        import importlib

        module, _, name = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise click.UsageError(f"--policy-mapping-fn {spec!r}: {exc}") from None
        return fn

    def default(agent_id: Any, *_: Any, **__: Any) -> str:
        if str(agent_id) in policy_ids:
            return str(agent_id)
        if len(policy_ids) == 1:
            return policy_ids[0]
        hint = f" (training used {recorded})" if recorded else ""
        raise click.UsageError(
            f"agent {agent_id!r} names none of the policies {policy_ids}: pass "
            f"--policy-mapping-fn MODULE:FUNCTION{hint}"
        )

    return default


def _default_policy_mapping(agent_id: Any) -> str:
    """A multi-agent env trained without ``multiagent.policies``: its one policy."""
    from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID

    return DEFAULT_POLICY_ID


def _rollout_multi_agent(
    trainer: Any,
    env_obj: Any,
    mapping: Any,
    steps: int,
    episodes: int,
    explore: bool,
    out: str | None,
    seed: int | None,
) -> None:
    """`rollout` for a `MultiAgentEnv`: every agent acts with its policy; an
    episode's reward is the sum over agents (each agent's is printed too)."""
    from rayfield.rllib.env.multi_agent_env import ALL, normalize_reset, normalize_step
    from rayfield.rllib.evaluation.multi_agent_sampler import call_mapping_fn

    start = time.time()
    total_steps, rewards, all_eps = 0, list[float](), []
    while total_steps < steps and (not episodes or len(rewards) < episodes):
        obs, _ = normalize_reset(env_obj.reset(seed=None if seed is None else seed + len(rewards)))
        bound: dict[Any, str] = {}
        states: dict[Any, Any] = {}
        prev: dict[Any, tuple[Any, float]] = {}
        per_agent: dict[Any, float] = {}
        done, rows = False, []
        while not done and total_steps < steps:
            actions = {}
            for aid, o in obs.items():
                pid = bound.setdefault(aid, call_mapping_fn(mapping, aid, None, None))
                init = trainer.get_policy(pid).get_initial_state()
                if not init:
                    actions[aid] = trainer.compute_action(o, policy_id=pid, explore=explore)
                    continue
                prev_a, prev_r = prev.get(aid, (None, 0.0))
                actions[aid], states[aid], _ = trainer.compute_action(
                    o,
                    states.get(aid, init),
                    prev_action=prev_a,
                    prev_reward=prev_r,
                    policy_id=pid,
                    explore=explore,
                )
            next_obs, rew, terms, truncs, _ = normalize_step(env_obj.step(actions))
            for aid, r in rew.items():
                per_agent[aid] = per_agent.get(aid, 0.0) + float(r or 0.0)
                if aid in actions:
                    prev[aid] = (actions[aid], float(r or 0.0))
            done = bool(terms[ALL] or truncs[ALL])
            total_steps += 1
            if out:
                plain = {str(k): _plain(v) for k, v in actions.items()}
                rows.append(
                    [
                        {str(k): _plain(v) for k, v in obs.items()},
                        plain,
                        {str(k): _plain(v) for k, v in next_obs.items()},
                        {str(k): float(v or 0.0) for k, v in rew.items()},
                        done,
                    ]
                )
            obs = next_obs
        if done:
            rewards.append(sum(per_agent.values()))
            agents = " ".join(f"{k}={v:.1f}" for k, v in sorted(per_agent.items(), key=str))
            click.echo(f"Episode reward {rewards[-1]:.1f} ({agents})")
        all_eps.append(rows)
    _finish_rollout(rewards, total_steps, start, out, all_eps)


def _finish_rollout(
    rewards: list[float], total_steps: int, start: float, out: str | None, episodes: list[Any]
) -> None:
    """Print the rollout's summary line and write ``--out``."""
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    click.echo(
        f"rollout: {len(rewards)} episodes, {total_steps} env steps, "
        f"mean reward {mean:.2f}, {time.time() - start:.1f} s wall"
    )
    if out:
        _write_out(out, episodes)


def _plain(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else x


def _write_out(path: str, episodes: list[list[list[Any]]]) -> None:
    """Write a multi-agent ``rllib evaluate --out``: one JSON list of ``[obs, actions,
    next_obs, rewards, done]`` rows per episode (dicts by agent id); the file is 0600.

    Raises:
        UnsafeFileError: ``path`` is a symlink or another user's file, or a directory
            above it fails the checks of `rayfield.util.private_files`.
    """
    with private_files.open_private(path, "w", what="the rollout output") as f:
        f.write(json.dumps(episodes))


cli.add_command(rollout, name="evaluate")


def main() -> None:  # pragma: no cover - console entry
    cli(prog_name="rllib")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli())
