"""runtime_env on a two-node cluster started by the CLI (the second node alone has
resource "b"): a task with a working_dir that only the other node can run sees its files
there, unpacked from the package the driver stored in the cluster."""

from __future__ import annotations

import os
from pathlib import Path

import rayfield as rf


@rf.remote(resources={"b": 1})
def read_there() -> tuple[str, str, str]:
    import wd_cluster_helper

    with open("data.txt") as f:
        return (
            str(rf.get_runtime_context().get_node_id()),
            f.read().strip(),
            wd_cluster_helper.VALUE + os.environ.get("RF_CLUSTER_VAR", ""),
        )


def test_working_dir_reaches_a_task_on_the_other_node(
    driver_cluster: tuple[str, Path], tmp_path: Path
) -> None:
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "data.txt").write_text("on every node\n")
    (wd / "wd_cluster_helper.py").write_text("VALUE = 'imported'\n")
    mine = str(rf.get_runtime_context().get_node_id())
    env = {"working_dir": str(wd), "env_vars": {"RF_CLUSTER_VAR": "+env"}}
    node, text, imported = rf.get(read_there.options(runtime_env=env).remote(), timeout=120)
    assert node != mine
    assert (text, imported) == ("on every node", "imported+env")
