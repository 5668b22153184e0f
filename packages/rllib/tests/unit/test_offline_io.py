"""Offline data files: the JSON and Parquet formats round-trip, malformed files fail with
the file and line named, writers roll over and keep files private, readers, mixes and
shuffles, and the importance-sampling estimators' arithmetic."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rayfield.rllib.evaluation.sample_batch_builder import SampleBatchBuilder
from rayfield.rllib.offline import (
    ImportanceSamplingEstimator,
    JsonReader,
    JsonWriter,
    MixedInput,
    OfflineDataError,
    ParquetWriter,
    ShuffledInput,
    WeightedImportanceSamplingEstimator,
    decode_batch,
    encode_batch,
)
from rayfield.rllib.offline.columns import pack, unpack
from rayfield.rllib.offline.input_reader import InputReader
from rayfield.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch


def _batch(n: int = 5, eps: int = 0) -> SampleBatch:
    rng = np.random.default_rng(eps)
    infos = np.empty(n, dtype=object)
    infos[:] = [{"k": i} for i in range(n)]
    return SampleBatch(
        obs=rng.standard_normal((n, 4)).astype(np.float32),
        new_obs=rng.standard_normal((n, 4)).astype(np.float32),
        actions=rng.integers(0, 2, n),
        rewards=np.ones(n, np.float32),
        dones=np.arange(n) == n - 1,
        eps_id=np.full(n, eps),
        action_prob=np.full(n, 0.5, np.float32),
        infos=infos,
    )


def _same(a: SampleBatch, b: SampleBatch) -> None:
    assert set(a) == set(b) and a.count == b.count
    for k in a:
        if a[k].dtype == object:
            assert list(a[k]) == list(b[k])
        else:
            np.testing.assert_allclose(a[k], b[k])
            assert a[k].shape == b[k].shape


@pytest.mark.parametrize("codec", ["lz4", "zlib", "raw"])
def test_json_round_trip(codec: str) -> None:
    batch = _batch()
    line = json.dumps(encode_batch(batch, ["obs", "new_obs", "actions"], codec))
    obj = json.loads(line)
    assert obj["type"] == "SampleBatch" and obj["obs"]["codec"] == codec
    assert isinstance(obj["rewards"], list)  # not packed: plain, readable lists
    out = decode_batch(obj, "x:1")
    _same(batch, out)
    assert out["obs"].dtype == np.float32 and out["actions"].dtype == batch["actions"].dtype
    multi = MultiAgentBatch({"a": batch, "b": _batch(3, 1)}, 7)
    back = decode_batch(json.loads(json.dumps(encode_batch(multi))), "x:2")
    assert isinstance(back, MultiAgentBatch) and back.count == 7
    _same(multi.policy_batches["b"], back.policy_batches["b"])


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        ({"type": "Pickle"}, "unknown batch type"),
        ([1, 2], "expected a JSON object"),
        ({"obs": [[1, 2], [3]], "actions": [0, 1]}, "different shapes"),
        ({"obs": [[1.0], [2.0]], "actions": [0]}, "different numbers of rows"),
        ({"obs": "gASVxxx"}, "pickle"),
        ({"obs": ["a", "b"]}, "must hold numbers"),
        ({"obs": {**pack(np.zeros((2, 3))), "shape": [2, 4]}}, "needs"),
        ({"obs": {**pack(np.zeros((2, 3))), "dtype": "|O"}}, "not bool, int or float"),
        ({"obs": {**pack(np.zeros(2)), "codec": "pickle"}}, "unknown codec"),
        ({"obs": {**pack(np.zeros(2)), "shape": [-1]}}, "non-negative"),
        ({"obs": {**pack(np.zeros(2)), "shape": [1 << 20, 1 << 20]}}, "over 2 GiB"),
        ({"obs": {**pack(np.zeros(2)), "data": "!!"}}, "base64"),
    ],
)
def test_malformed_batches_are_clear_errors(obj: Any, problem: str) -> None:
    with pytest.raises(OfflineDataError, match=problem) as info:
        decode_batch(obj, "data.json:7")
    assert "data.json:7" in str(info.value)


def test_unpack_refuses_a_decompression_bomb() -> None:
    big = pack(np.zeros(1 << 16, np.uint8))
    with pytest.raises(OfflineDataError, match=r"does not decompress|needs"):
        unpack({**big, "shape": [16]})


def test_reader_names_file_and_line(tmp_path: Path) -> None:
    good = json.dumps(encode_batch(_batch()))
    path = tmp_path / "bad.json"
    path.write_text(good + "\n\n" + good[:-5] + "\n")
    reader = JsonReader(str(path))
    assert reader.next().count == 5
    with pytest.raises(OfflineDataError, match=rf"{path}:3: not valid JSON"):
        reader.next()
    with pytest.raises(ValueError, match="not a file, a directory or a glob"):
        JsonReader(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"holds no \.json or \.parquet files"):
        JsonReader(str(tmp_path / "empty"))


def test_writer_rolls_over_and_keeps_files_private(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = JsonWriter(out, max_file_size=3000, compress_columns=[])
    for i in range(6):
        writer.write(_batch(5, i))
    writer.close()
    files = sorted(out.iterdir())
    assert len(files) > 1
    assert all(f.name.startswith("output-") and "_worker-0_" in f.name for f in files)
    assert all(f.stat().st_size <= 3000 for f in files)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    # every batch comes back, once, through a directory, a glob and a list of files
    for source in (str(out), str(out / "*.json"), [str(f) for f in files]):
        got = list(JsonReader(source).read_all_files())
        assert sorted(int(b["eps_id"][0]) for b in got) == list(range(6))
    # next() cycles through the files forever
    reader = JsonReader(str(out))
    assert len({int(reader.next()["eps_id"][0]) for _ in range(18)}) == 6


def test_parquet_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    writer = ParquetWriter(tmp_path / "pq", max_file_size=1)  # a file per batch
    batches = [_batch(4, i) for i in range(3)]
    for b in batches:
        writer.write(b)
    writer.close()
    assert len(writer.files) == 3
    assert {stat.S_IMODE(f.stat().st_mode) for f in writer.files} == {0o600}
    got = sorted(JsonReader(str(tmp_path / "pq")).read_all_files(), key=lambda b: b["eps_id"][0])
    for a, b in zip(batches, got):
        _same(a, b)
    import pyarrow.parquet as pq

    assert pq.read_table(writer.files[0]).schema.field("obs").type.list_size == 4
    with pytest.raises(TypeError, match="single-agent"):
        writer.write(MultiAgentBatch({"a": batches[0]}, 4))
    (tmp_path / "pq" / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(OfflineDataError, match=r"broken\.parquet: not a readable Parquet"):
        list(JsonReader(str(tmp_path / "pq" / "broken.parquet")).read_all_files())


class _Const(InputReader):
    def __init__(self, value: int) -> None:
        self.value = value

    def next(self) -> Any:
        return self.value


def test_mixed_and_shuffled_input() -> None:
    from rayfield.rllib.offline.io_context import IOContext

    mix = MixedInput({_Const(0): 0.25, _Const(1): 0.75}, IOContext(config={"seed": 0}))  # type: ignore[dict-item]
    draws = [mix.next() for _ in range(4000)]
    assert 0.72 < np.mean(draws) < 0.78
    with pytest.raises(ValueError, match="sum to 1"):
        MixedInput({"sampler": 0.5}, IOContext())

    class Counter(InputReader):
        n = 0

        def next(self) -> Any:
            self.n += 1
            return self.n

    shuffled = ShuffledInput(Counter(), 4, seed=0)
    out = [shuffled.next() for _ in range(20)]
    assert len(set(out)) == 20 and out != sorted(out)  # each once, not in order
    assert max(b - a for a, b in zip(range(1, 21), out)) <= 4  # within the window


class _FixedPolicy:
    """pi(a) = p_new for every logged action."""

    def __init__(self, p_new: float) -> None:
        self.p_new = p_new

    def compute_log_likelihoods(self, actions: Any, obs: Any, *args: Any) -> np.ndarray:
        return np.log(np.full(len(actions), self.p_new))


def test_importance_sampling_arithmetic() -> None:
    ep = SampleBatch(
        obs=np.zeros((3, 1), np.float32),
        actions=np.zeros(3, np.int64),
        rewards=np.array([1.0, 2.0, 4.0], np.float32),
        action_prob=np.full(3, 0.5, np.float32),
        eps_id=np.zeros(3),
    )
    gamma = 0.5
    # rho_t = 2^(t+1); gamma^t r_t = 1, 1, 1
    is_est = ImportanceSamplingEstimator(_FixedPolicy(1.0), gamma).estimate(ep)
    assert is_est.metrics["V_prev"] == pytest.approx(3.0)
    assert is_est.metrics["V_step_IS"] == pytest.approx(2 + 4 + 8)
    assert is_est.metrics["V_gain_est"] == pytest.approx(14 / 3)
    wis = WeightedImportanceSamplingEstimator(_FixedPolicy(1.0), gamma)
    # the first episode alone: rho_t / mean(rho_t) = 1, so WIS = V_prev
    assert wis.estimate(ep).metrics["V_step_WIS"] == pytest.approx(3.0)
    same = ImportanceSamplingEstimator(_FixedPolicy(0.5), gamma).estimate(ep)
    assert same.metrics["V_gain_est"] == pytest.approx(1.0)  # the behaviour policy itself
    two = SampleBatch.concat_samples([ep, SampleBatch({**ep, "eps_id": np.ones(3)})])
    est = ImportanceSamplingEstimator(_FixedPolicy(1.0), gamma)
    est.process(two)
    assert [e.metrics["V_step_IS"] for e in est.get_metrics()] == pytest.approx([14, 14])
    with pytest.raises(ValueError, match="action_prob"):
        est.estimate(SampleBatch({k: v for k, v in ep.items() if k != "action_prob"}))
    with pytest.raises(ValueError, match="input_evaluation"):
        ImportanceSamplingEstimator(object(), gamma)


def test_sample_batch_builder() -> None:
    b = SampleBatchBuilder()
    b.add_values(obs=[0.0, 1.0], actions=1, infos={})
    b.add_values(obs=[1.0, 2.0], actions=0, infos={"x": 1})
    batch = b.build_and_reset()
    assert batch.count == 2 and batch["obs"].shape == (2, 2) and batch["infos"][1] == {"x": 1}
    assert b.count == 0
    b.add_values(obs=[0.0], actions=1)
    with pytest.raises(ValueError, match="missing"):
        b.add_values(obs=[0.0])


def test_batches_are_adapted_to_the_worker() -> None:
    import gymnasium as gym

    from rayfield.rllib.offline.io_context import IOContext
    from rayfield.rllib.offline.json_reader import adapt_batch
    from rayfield.rllib.offline.worker_io import estimator_specs

    class Worker:
        policy = type("P", (), {"action_space": gym.spaces.Box(0.0, 10.0, (1,))})()
        policy_map = {"default_policy": policy}

    batch = SampleBatch(actions=np.array([[-1.0], [0.0], [1.0]]), dones=[False, False, True])
    ctx = IOContext(config={"actions_in_input_normalized": True}, worker=Worker())
    out = adapt_batch(batch, ctx)
    np.testing.assert_allclose(out["actions"][:, 0], [0.0, 5.0, 10.0])
    # data with only "dones" (the reference's conversion example) gets terminateds
    assert list(out["terminateds"]) == [False, False, True] and not out["truncateds"].any()
    specs, simulation = estimator_specs(
        {"input_evaluation": {"mine": {"type": "wis"}, "other": {"type": "ImportanceSampling"}}}
    )
    assert specs == {
        "mine": WeightedImportanceSamplingEstimator,
        "other": ImportanceSamplingEstimator,
    }
    assert not simulation and estimator_specs({"input_evaluation": ["simulation"]})[1]
