"""Trainable and function trainables in this process (no actors)."""

from __future__ import annotations

import os

import pytest

from rayfield import tune
from rayfield.testing import wait_for
from rayfield.tune.function_trainable import wrap_function
from rayfield.tune.trainable import read_checkpoint_dir, write_checkpoint_dir
from rayfield.util import get_node_ip_address


class Modern(tune.Trainable):
    def setup(self, config):
        self.value = config["start"]

    def step(self):
        self.value += 1
        return {
            "value": self.value,
            "mean_loss": 2.0,
            "timesteps_this_iter": 10,
            "episodes_this_iter": 2,
        }

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.txt"), "w") as f:
            f.write(str(self.value))
        return checkpoint_dir

    def load_checkpoint(self, checkpoint):
        with open(os.path.join(checkpoint, "state.txt")) as f:
            self.value = int(f.read())

    def reset_config(self, new_config):
        self.value = new_config["start"]
        return True


class Classic(tune.Trainable):
    def _setup(self, config):
        self.value = config["start"]

    def _train(self):
        self.value += 2
        return {"value": self.value}

    def _save(self, checkpoint_dir):
        return {"value": self.value}

    def _restore(self, checkpoint):
        self.value = checkpoint["value"]


def test_auto_filled_result_fields(tmp_path):
    t = Modern({"start": 0}, trial_info={"trial_id": "abc", "logdir": str(tmp_path)})
    r1, r2 = t.train(), t.train()
    for key in (
        "done",
        "hostname",
        "node_ip",
        "pid",
        "time_this_iter_s",
        "time_total_s",
        "training_iteration",
        "experiment_id",
        "date",
        "timestamp",
        "config",
        "time_since_restore",
        "timesteps_since_restore",
        "iterations_since_restore",
        "timesteps_total",
        "episodes_total",
        "neg_mean_loss",
    ):
        assert key in r2, key
    assert (r1["training_iteration"], r2["training_iteration"]) == (1, 2)
    assert r2["timesteps_total"] == 20 and r2["episodes_total"] == 4
    assert r2["neg_mean_loss"] == -2.0 and r2["done"] is False
    assert r2["time_total_s"] == pytest.approx(r1["time_this_iter_s"] + r2["time_this_iter_s"])
    assert r2["pid"] == os.getpid() and r2["config"] == {"start": 0}
    assert os.getcwd() == str(tmp_path)  # the trainable runs in its trial directory


def test_user_time_this_iter_overrides_the_measured_one(tmp_path):
    class T(tune.Trainable):
        def step(self):
            return {"time_this_iter_s": 5.0}

    t = T(trial_info={"logdir": str(tmp_path)})
    t.train()
    assert t.train()["time_total_s"] == 10.0


@pytest.mark.parametrize("cls,expected", [(Modern, 12), (Classic, 14)])
def test_save_restore_round_trip_modern_and_classic(tmp_path, cls, expected):
    t = cls({"start": 10}, trial_info={"logdir": str(tmp_path / "a")})
    t.train()
    blob = t.save_to_object()
    t.train()
    other = cls({"start": 0}, trial_info={"logdir": str(tmp_path / "b")})
    other.restore_from_object(blob)
    assert other.iteration == 1
    result = other.train()
    assert result["value"] == expected and result["training_iteration"] == 2
    assert result["iterations_since_restore"] == 1
    assert result["experiment_id"] == t.train()["experiment_id"]
    path = t.save(str(tmp_path / "disk"))
    assert os.path.isdir(path)
    fresh = cls({"start": 0}, trial_info={"logdir": str(tmp_path / "c")})
    fresh.restore(path)
    assert fresh.iteration == t.iteration


def test_checkpoint_directory_round_trip(tmp_path):
    t = Modern({"start": 3}, trial_info={"logdir": str(tmp_path)})
    t.train()
    path = write_checkpoint_dir(t.save_to_object(), str(tmp_path / "checkpoint_000001"))
    blob = read_checkpoint_dir(path)
    assert blob["meta"]["iteration"] == 1 and "state.txt" in blob["files"]
    with pytest.raises(FileNotFoundError, match="not a Tune checkpoint"):
        read_checkpoint_dir(str(tmp_path))


def test_save_outside_the_checkpoint_dir_is_refused(tmp_path):
    class Bad(tune.Trainable):
        def step(self):
            return {}

        def save_checkpoint(self, checkpoint_dir):
            return str(tmp_path)

    with pytest.raises(ValueError, match="must be inside"):
        Bad(trial_info={"logdir": str(tmp_path)}).save_to_object()


def test_step_must_return_a_dict(tmp_path):
    class Bad(tune.Trainable):
        def step(self):
            return 3

    with pytest.raises(tune.TuneError, match="must return a dict"):
        Bad(trial_info={"logdir": str(tmp_path)}).train()


def test_reset_gives_a_new_trial_fresh_counters(tmp_path):
    t = Modern({"start": 0}, trial_info={"trial_id": "a", "logdir": str(tmp_path / "a")})
    t.train()
    assert t.reset({"start": 100}, {"trial_id": "b", "logdir": str(tmp_path / "b")})
    r = t.train()
    assert r["value"] == 101 and r["training_iteration"] == 1 and t.trial_id == "b"
    assert not Classic({"start": 0}, trial_info={"logdir": str(tmp_path)}).reset({}, {})


def test_next_trial_stops_resets_restores_and_trains_in_one_call(tmp_path):
    stopped = []

    class Tracked(Modern):
        def cleanup(self):
            stopped.append(self.trial_id)

    t = Tracked({"start": 0}, trial_info={"trial_id": "a", "logdir": str(tmp_path / "a")})
    t.train()
    blob = t.save_to_object()  # value 1
    out = t.next_trial(
        {"start": 50}, {"trial_id": "b", "logdir": str(tmp_path / "b")}, True, None, 3, 10.0
    )
    assert stopped == ["a"] and t.trial_id == "b"
    assert [r["value"] for r in out] == [51, 52, 53]
    assert [r["training_iteration"] for r in out] == [1, 2, 3]
    # A checkpoint blob is restored before training; without stop_first no cleanup runs.
    out = t.next_trial({"start": 7}, {"trial_id": "c"}, False, blob, 1, 10.0)
    assert stopped == ["a"] and [(r["value"], r["training_iteration"]) for r in out] == [(2, 2)]
    # A trainable that cannot reset says so (None) and trains nothing.
    classic = Classic({"start": 0}, trial_info={"logdir": str(tmp_path)})
    assert classic.next_trial({}, {}, True, None, 1, 1.0) is None
    assert classic.iteration == 0


def test_next_trial_on_a_reused_function_actor_ends_the_old_thread(tmp_path):
    def count(config):
        for i in range(100):
            tune.report(x=config["k"] * i)

    t = wrap_function(count)({"k": 1}, trial_info={"logdir": str(tmp_path)})
    t.train()
    old = t._thread
    out = t.next_trial({"k": 10}, {"logdir": str(tmp_path)}, True, None, 4, 10.0)
    assert old is not None and not old.is_alive()
    assert [r["x"] for r in out] == [0, 10, 20, 30]
    t.stop()


def run_function(fn, config=None, tmp_path=None, max_iters=100):
    cls = wrap_function(fn)
    t = cls(config or {}, trial_info={"logdir": str(tmp_path) if tmp_path else None})
    results = []
    for _ in range(max_iters):
        r = t.train()
        results.append(r)
        if r["done"]:
            break
    t.stop()
    return t, results


def test_function_api_classic_reporter_is_lock_step(tmp_path):
    seen = []

    def train(config, reporter):
        for i in range(3):
            seen.append(i)
            reporter(acc=i * config["k"])

    _, results = run_function(train, {"k": 2}, tmp_path)
    assert [r.get("acc") for r in results[:3]] == [0, 2, 4]
    assert results[-1]["__duplicate__"] and results[-1]["done"]
    assert [r["training_iteration"] for r in results[:3]] == [1, 2, 3]


def test_function_api_track_and_modern_report(tmp_path):
    def with_track(config):
        tune.track.log(a=1)
        tune.track.log(a=2)

    _, results = run_function(with_track, tmp_path=tmp_path)
    assert [r.get("a") for r in results[:2]] == [1, 2]

    def modern(config):
        tune.report({"a": 1}, checkpoint=None)
        tune.report(a=2, done=True)
        tune.report(a=3)  # never reached: the trial is done

    _, results = run_function(modern, tmp_path=tmp_path)
    assert [r["a"] for r in results] == [1, 2] and results[-1]["done"]

    def returns(config):
        tune.report(a=1)
        return {"a": 9}

    _, results = run_function(returns, tmp_path=tmp_path)
    assert results[-1]["a"] == 9 and results[-1]["done"]


def test_function_errors_become_tune_errors_with_the_traceback(tmp_path):
    def broken(config):
        tune.report(a=1)
        raise KeyError("missing-key")

    cls = wrap_function(broken)
    t = cls({}, trial_info={"logdir": str(tmp_path)})
    t.train()
    with pytest.raises(tune.TuneError, match="missing-key"):
        t.train()


def test_function_checkpoints_and_restart(tmp_path):
    def train(config):
        start = 0
        ckpt = tune.get_checkpoint()
        if ckpt is not None:
            with open(os.path.join(ckpt.path, "it")) as f:
                start = int(f.read())
        for i in range(start, 5):
            d = tmp_path / f"c{i}"
            d.mkdir(exist_ok=True)
            (d / "it").write_text(str(i + 1))
            tune.report({"i": i}, checkpoint=tune.Checkpoint.from_directory(str(d)))

    cls = wrap_function(train)
    t = cls({}, trial_info={"logdir": str(tmp_path)})
    r = [t.train() for _ in range(3)]
    assert [x["i"] for x in r] == [0, 1, 2] and "__checkpoint__" in r[-1]
    blob = t.save_to_object()
    t.stop()
    fresh = cls({}, trial_info={"logdir": str(tmp_path)})
    fresh.restore_from_object(blob)
    assert fresh.train()["i"] == 3
    fresh.stop()


def test_stopping_a_function_mid_run_ends_its_thread(tmp_path):
    def forever(config):
        while True:
            tune.report(x=1)

    cls = wrap_function(forever)
    t = cls({}, trial_info={"logdir": str(tmp_path)})
    t.train()
    thread = t._thread
    t.stop()
    assert thread is not None and not thread.is_alive()
    assert t.reset({"a": 1}, {"logdir": str(tmp_path)})
    assert t.train()["x"] == 1
    t.stop()


def test_report_outside_a_trial_is_a_clear_error():
    with pytest.raises(tune.TuneError, match="outside a trial"):
        tune.report(a=1)


def test_a_function_that_swallows_the_stop_is_left_behind(tmp_path, monkeypatch):
    import rayfield.tune.function_trainable as ft

    monkeypatch.setattr(ft, "_JOIN_TIMEOUT_S", 0.3)

    def stubborn(config):
        while True:
            try:
                tune.report(x=1)
            except Exception:  # swallows StopTrial (a StopIteration)
                pass

    cls = wrap_function(stubborn)
    t = cls({}, trial_info={"logdir": str(tmp_path)})
    t.train()
    t.stop()  # returns after its join timeout instead of hanging (pytest-timeout: a hang)
    assert t._thread is not None and t._thread.is_alive()  # left behind, as logged


def test_function_runs_ahead_only_within_a_buffered_window():
    made = []

    def counting(config):
        for i in range(100):
            made.append(i)
            tune.report(score=i)

    t = wrap_function(counting)(config={})
    assert [r["score"] for r in t.train_buffered(5, 60.0)] == [0, 1, 2, 3, 4]
    # the function waits for a credit: it cannot run ahead of its window
    wait_for(lambda: t._session.resume.waiting, 10, "the function to wait for a credit")
    assert len(made) == 5
    assert t.train()["score"] == 5  # one more, in lock step
    wait_for(lambda: t._session.resume.waiting, 10, "the function to wait again")
    assert len(made) == 6
    results = t.train_buffered(50, 60.0, stop={"score": 9})
    assert [r["score"] for r in results] == [6, 7, 8, 9]
    t.stop()  # the run-ahead function is stopped at its next report
    assert len(made) <= 6 + 50


def test_a_reused_function_actor_runs_its_trials_on_one_thread(tmp_path, monkeypatch):
    import threading

    import rayfield.tune.function_trainable as ft

    monkeypatch.setattr(ft, "_JOIN_TIMEOUT_S", 0.3)
    threads = []

    def trial(config):
        threads.append(threading.current_thread())
        while True:
            try:
                tune.report(x=config["k"])
            except StopIteration:
                if not config["stubborn"]:
                    return
            # stubborn: swallows the stop and goes on reporting

    t = wrap_function(trial)({"k": 0, "stubborn": False}, trial_info={"logdir": str(tmp_path)})
    for k in (1, 2):
        out = t.next_trial(
            {"k": k, "stubborn": k == 2}, {"logdir": str(tmp_path)}, True, None, 3, 10.0
        )
        assert [r["x"] for r in out] == [k, k, k]
    assert len(threads) == 2 and threads[0] is threads[1]  # no thread started per trial
    assert threads[0].name.startswith("trial-")
    # The stubborn function keeps its thread: the next trial gets a thread of its own.
    out = t.next_trial({"k": 3, "stubborn": False}, {"logdir": str(tmp_path)}, True, None, 2, 10.0)
    assert [r["x"] for r in out] == [3, 3]
    assert len(threads) == 3 and threads[2] is not threads[1] and threads[1].is_alive()
    t.stop()


def test_an_idle_runner_thread_ends_and_the_next_trial_starts_another(tmp_path, monkeypatch):
    import threading

    import rayfield.tune.function_trainable as ft
    from rayfield.testing import wait_for

    monkeypatch.setattr(ft, "_RUNNER_IDLE_S", 0.2)
    threads = []

    def once(config):
        threads.append(threading.current_thread())
        tune.report(x=config["k"])

    t = wrap_function(once)({"k": 1}, trial_info={"logdir": str(tmp_path)})
    assert t.train()["x"] == 1
    assert t.train()["done"]  # the function returned: its runner thread is idle
    wait_for(lambda: not threads[0].is_alive(), 10, "the idle runner thread to end")
    out = t.next_trial({"k": 2}, {"logdir": str(tmp_path)}, True, None, 1, 10.0)
    assert [r["x"] for r in out] == [2] and threads[1] is not threads[0]
    t.stop()


def test_host_fields_without_rayfield_are_the_routed_address_and_not_kept():
    # Outside an initialized rayfield the address is get_node_ip_address()'s route, and
    # it is looked up again next time (an init may follow).
    from rayfield.tune import auto_fields

    assert auto_fields.node_address() == (False, None)
    pid, _, address = auto_fields.host()
    assert (pid, address) == (os.getpid(), get_node_ip_address())
    assert auto_fields._HOST is None
