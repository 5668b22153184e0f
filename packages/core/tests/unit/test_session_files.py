"""The checks of ``session_files``: each refusal, and the modes of what it creates.

No processes: another user is played by making ``os.getuid`` return another uid (then
nothing on disk is "ours"), group/world-writable paths by ``chmod``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from rayfield._private.common import session_files as sf
from rayfield.exceptions import RayfieldError, UnsafeSessionError


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return sf.ensure_root(tmp_path / "root")


@pytest.fixture
def as_other_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on this process is another user: nothing on disk is its own."""
    other = os.getuid() + 4242
    monkeypatch.setattr(os, "getuid", lambda: other)


def test_the_default_root_is_per_user_under_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", "/some/tmp")
    assert sf.default_root() == Path(f"/some/tmp/rayfield-{os.getuid()}")


def test_a_new_root_and_session_are_0700(tmp_path: Path) -> None:
    session = sf.new_session_dir(tmp_path / "root")
    assert session.parent == tmp_path / "root" and session.name.startswith("session_")
    for d in (tmp_path / "root", session, session / "logs"):
        assert mode(d) == 0o700, d
    assert sf.new_session_dir(tmp_path / "root") != session  # same second: a suffix


def test_private_files_are_0600_and_private_dirs_0700(root: Path) -> None:
    sf.write_private(root / "node.json", json.dumps({"a": 1}))
    assert mode(root / "node.json") == 0o600
    assert sf.read_json(root / "node.json") == {"a": 1}
    (root / "log").write_text("x")
    (root / "log").chmod(0o644)
    with sf.open_private(root / "log") as f:
        f.write(b"y")
    assert mode(root / "log") == 0o600 and (root / "log").read_text() == "xy"
    sub = root / "sockets"
    sub.mkdir(mode=0o755)
    sf.private_dir(sub)
    assert mode(sub) == 0o700


def test_a_root_of_another_user_is_refused(root: Path, as_other_user: None) -> None:
    with pytest.raises(UnsafeSessionError, match=r"session root .* it is not yours.*--temp-dir"):
        sf.ensure_root(root)
    with pytest.raises(UnsafeSessionError):
        sf.new_session_dir(root)
    with pytest.raises(UnsafeSessionError):
        sf.existing_root(root)


def test_a_world_writable_root_is_refused_with_the_fix_in_the_message(root: Path) -> None:
    root.chmod(0o777)
    with pytest.raises(UnsafeSessionError) as err:
        sf.ensure_root(root)
    message = str(err.value)
    assert "mode 777" in message and f"chmod go-w {root}" in message
    assert f"rm -rf {root}" in message and "temp_dir=" in message
    assert isinstance(err.value, PermissionError) and isinstance(err.value, RayfieldError)
    root.chmod(0o770)  # group-writable too
    with pytest.raises(UnsafeSessionError, match="group or others can write"):
        sf.existing_root(root)


def test_a_root_that_is_a_symlink_is_checked_through(tmp_path: Path, root: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(root)
    assert sf.ensure_root(link) == link  # this user's link to this user's directory
    root.chmod(0o777)
    with pytest.raises(UnsafeSessionError, match="the target of the session root"):
        sf.ensure_root(link)


def test_every_link_of_a_chain_is_checked(tmp_path: Path, root: Path) -> None:
    (tmp_path / "hop").symlink_to(root)
    link = tmp_path / "link"
    link.symlink_to("hop")  # relative: to the link "hop", then to the root
    assert sf.check_owned(link, "session_latest").st_ino == os.stat(root).st_ino
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    link.unlink()
    link.symlink_to("loose")  # to a world-writable directory
    with pytest.raises(UnsafeSessionError, match="the target of session_latest"):
        sf.check_owned(link, "session_latest")
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    with pytest.raises(UnsafeSessionError, match="too many symlinks"):
        sf.check_owned(loop, "session_latest")


def test_a_symlink_of_another_user_is_refused(root: Path, as_other_user: None) -> None:
    with pytest.raises(UnsafeSessionError, match="the symlink is not yours"):
        sf.check_owned(_link(root), "session_latest")


def _link(root: Path) -> Path:
    link = root / "a_link"
    link.symlink_to(root)
    return link


def test_a_directory_above_the_root_that_others_may_rename_in_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeSessionError, match=r"a directory above the session root.*chmod \+t"):
        sf.ensure_root(shared / "root")
    shared.chmod(0o1777)  # sticky, as /tmp: only the owner of an entry may rename it
    assert sf.ensure_root(shared / "root") == shared / "root"


def test_session_latest_pointing_at_an_unsafe_session_is_refused(root: Path) -> None:
    session = sf.new_session_dir(root)
    sf.point_latest(root, session)
    assert sf.latest_session(root) == session.resolve()
    session.chmod(0o777)
    with pytest.raises(UnsafeSessionError, match="the target of session_latest"):
        sf.latest_session(root)


def test_session_latest_of_another_user_is_refused(root: Path, as_other_user: None) -> None:
    with pytest.raises(UnsafeSessionError):  # the root is checked first
        sf.latest_session(root)


def test_no_session_latest_or_a_dangling_one_is_none(tmp_path: Path, root: Path) -> None:
    assert sf.latest_session(tmp_path / "missing") is None
    assert sf.latest_session(root) is None
    (root / "session_latest").symlink_to(root / "gone")
    assert sf.latest_session(root) is None


@pytest.mark.parametrize("name", ["node.json", "cluster.json"])
def test_session_json_others_can_write_is_refused(root: Path, name: str) -> None:
    path = root / name
    sf.write_private(path, "{}")
    path.chmod(0o666)
    with pytest.raises(UnsafeSessionError, match=f"refusing {name} {path}"):
        sf.read_json(path)


@pytest.mark.parametrize("name", ["node.json", "cluster.json"])
def test_session_json_of_another_user_is_refused(
    root: Path, name: str, as_other_user: None
) -> None:
    path = root / name
    path.write_text("{}")
    with pytest.raises(UnsafeSessionError, match="it is not yours"):
        sf.read_json(path)


def test_missing_or_half_written_json_is_none(root: Path) -> None:
    assert sf.read_json(root / "node.json") is None
    sf.write_private(root / "node.json", '{"socket": ')
    assert sf.read_json(root / "node.json") is None


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = Path(tmp_path) / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    yield path
    server.close()


def test_a_socket_others_can_write_is_refused(unix_socket: Path) -> None:
    unix_socket.chmod(0o600)
    assert sf.check_socket(unix_socket) == str(unix_socket)
    unix_socket.chmod(0o666)
    with pytest.raises(UnsafeSessionError, match="the node socket"):
        sf.check_socket(unix_socket)


def test_a_socket_of_another_user_is_refused(unix_socket: Path, as_other_user: None) -> None:
    unix_socket.chmod(0o600)
    with pytest.raises(UnsafeSessionError, match="the node socket"):
        sf.check_socket(unix_socket)


def test_find_node_checks_every_step(root: Path, unix_socket: Path) -> None:
    with pytest.raises(ConnectionError, match="no running rayfield node"):
        sf.find_node("auto", root)
    session = sf.new_session_dir(root)
    sf.point_latest(root, session)
    unix_socket.chmod(0o600)
    sf.write_private(session / "node.json", json.dumps({"socket": str(unix_socket)}))
    socket_path, found, info = sf.find_node("auto", root)
    assert socket_path == str(unix_socket) and found == session.resolve()
    assert info == {"socket": str(unix_socket)}
    assert sf.find_node(str(session), None)[0] == str(unix_socket)
    assert sf.find_node(str(unix_socket), None)[0] == str(unix_socket)
    unix_socket.chmod(0o777)
    with pytest.raises(UnsafeSessionError, match="the node socket"):
        sf.find_node("auto", root)
    sf.write_private(session / "node.json", json.dumps({"socket": str(root / "gone.sock")}))
    with pytest.raises(ConnectionError, match="is not running"):
        sf.find_node("auto", root)
