"""The examples run (small) on the test cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

pytestmark = pytest.mark.usefixtures("cluster")


def test_asha_digits_finds_an_accurate_config(tmp_path):
    import asha_digits

    out = asha_digits.main(num_samples=6, storage_path=str(tmp_path))
    assert out["errors"] == 0 and out["trials"] == 6
    assert out["val_accuracy"] > 0.85
    assert out["epochs"] < 6 * 20  # ASHA stopped some trials early


def test_hyperband_example_classic_class_api(tmp_path):
    import hyperband_example

    out = hyperband_example.main(smoke_test=True, storage_path=str(tmp_path))
    assert out["ok"], out


def test_pbt_example_beats_fixed_learning_rates(tmp_path):
    import pbt_example

    out = pbt_example.main(smoke_test=True, storage_path=str(tmp_path))
    assert out["perturbations"] > 0 and out["ok"], out


def test_bayesopt_example_finds_the_optimum(tmp_path):
    import bayesopt_example

    out = bayesopt_example.main(smoke_test=True, storage_path=str(tmp_path))
    assert out["ok"], out
