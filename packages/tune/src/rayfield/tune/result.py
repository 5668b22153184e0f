"""Names of the result fields Tune fills in for every training iteration.

A trainable reports a dict; ``Trainable.train`` adds the fields below when the user did
not set them. The driver adds ``trial_id``; ``done`` is True on a trial's final result.
"""

from __future__ import annotations

DONE = "done"
SHOULD_CHECKPOINT = "should_checkpoint"
HOSTNAME = "hostname"
NODE_IP = "node_ip"
PID = "pid"
EPISODE_REWARD_MEAN = "episode_reward_mean"
MEAN_LOSS = "mean_loss"
NEG_MEAN_LOSS = "neg_mean_loss"
MEAN_ACCURACY = "mean_accuracy"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TRAINING_ITERATION = "training_iteration"
EXPERIMENT_ID = "experiment_id"
TRIAL_ID = "trial_id"
DATE = "date"
TIMESTAMP = "timestamp"
CONFIG = "config"
TIME_SINCE_RESTORE = "time_since_restore"
TIMESTEPS_SINCE_RESTORE = "timesteps_since_restore"
ITERATIONS_SINCE_RESTORE = "iterations_since_restore"
# Measured by the driver: seconds Tune spent on this result outside the trainable (its
# share of fetching the batch it came in, then the scheduler, searcher, stop rules and
# checkpoint policy; writing the result files comes after and is not included).
TUNE_OVERHEAD_S = "tune_overhead_s"

DEFAULT_METRIC = EPISODE_REWARD_MEAN
# Fields that are not metrics (left out of the console and of the TensorBoard scalars).
AUTO_FIELDS = frozenset(
    {
        DONE,
        HOSTNAME,
        NODE_IP,
        PID,
        EXPERIMENT_ID,
        TRIAL_ID,
        DATE,
        TIMESTAMP,
        CONFIG,
    }
)
