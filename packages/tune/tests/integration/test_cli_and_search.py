"""The `tune` command, a Searcher through tune.run, and the console status output."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from searcher_run import run_searcher

from rayfield import tune
from rayfield.tune.cli import cli
from rayfield.tune.search import ConcurrencyLimiter, Searcher

pytestmark = pytest.mark.usefixtures("cluster")


class GridWalk(Searcher):
    """Suggests x = 0..n-1 in order, and remembers what completed."""

    def __init__(self, n, **kw):
        super().__init__(**kw)
        self.n, self.next_x, self.completed = n, 0, {}

    def suggest(self, trial_id):
        if self.next_x >= self.n:
            return Searcher.FINISHED
        self.next_x += 1
        return {"x": self.next_x - 1}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed[trial_id] = result


def test_a_searcher_drives_tune_run_and_the_cli_lists_it(tmp_path, capsys):
    searcher = GridWalk(5)

    def f(config):
        tune.report(score=config["x"] * 10 + config["c"])

    analysis = tune.run(
        f,
        name="walk",
        config={"c": 1},
        search_alg=ConcurrencyLimiter(searcher, max_concurrent=1),
        num_samples=10,
        metric="score",
        mode="max",
        local_dir=str(tmp_path),
        verbose=1,
    )
    assert sorted(t.config["x"] for t in analysis) == [0, 1, 2, 3, 4]
    assert sorted(r["score"] for r in searcher.completed.values()) == [1, 11, 21, 31, 41]
    assert analysis.best_config == {"c": 1, "x": 4}
    out = capsys.readouterr().out
    assert "== Status ==" in out and "Number of trials: 5 ({'TERMINATED': 5})" in out

    runner = CliRunner()
    listed = runner.invoke(
        cli,
        [
            "ls",
            str(tmp_path / "walk"),
            "--columns",
            "trial_id,status,score",
            "--sort",
            "score",
            "--filter",
            "score >= 21",
        ],
    )
    assert listed.exit_code == 0, listed.output
    rows = listed.output.strip().splitlines()[2:]
    assert [r.split("|")[2].strip() for r in rows] == ["21", "31", "41"]
    out_file = tmp_path / "walk.csv"
    saved = runner.invoke(cli, ["ls", str(tmp_path / "walk"), "--output", str(out_file)])
    assert saved.exit_code == 0 and out_file.exists()
    experiments = runner.invoke(cli, ["lsx", str(tmp_path)])
    assert "walk" in experiments.output and "5" in experiments.output
    missing = runner.invoke(cli, ["ls", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "No experiment state found!" in missing.output
    bad = runner.invoke(cli, ["ls", str(tmp_path / "walk"), "--filter", "score ~ 3"])
    assert bad.exit_code != 0 and "use '<column> <op> <value>'" in bad.output
    note = runner.invoke(cli, ["add-note", str(tmp_path / "walk")], env={"EDITOR": "touch"})
    assert note.exit_code == 0 and (tmp_path / "walk" / "note.txt").exists()


@pytest.mark.parametrize("searcher_name", ["gp", "optuna"])
def test_model_based_searchers_through_tune_run(tmp_path, searcher_name):
    from rayfield.tune.search.gp import GPSearch
    from rayfield.tune.search.optuna import OptunaSearch

    searcher = (
        GPSearch(random_state=0, n_initial_points=3)
        if searcher_name == "gp"
        else OptunaSearch(seed=0)
    )
    analysis = run_searcher(searcher, tmp_path, searcher_name, num_samples=8)
    assert analysis.best_result["loss"] < 1.05
