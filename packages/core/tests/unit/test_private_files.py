"""``rayfield.util.private_files``: the modes it creates, and each refusal.

No processes. Another user's path is made with ``os.chown`` (the tests run as root, as
the second-user tests do); a symlink swapped in, a loose mode and a foreign directory
above are each refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rayfield.exceptions import UnsafeFileError, UnsafeSessionError
from rayfield.util import private_files as pf

OTHER_UID = 4242


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def give_away(path: Path) -> None:
    """Make ``path`` another (non-root) user's."""
    if os.getuid() != 0:
        pytest.fail("these tests chown paths to another user: run them as root (CI does)")
    os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)


def test_reachable_from_rayfield_util_and_an_unsafe_session_error_is_one() -> None:
    import rayfield.util

    assert rayfield.util.private_files is pf
    assert issubclass(UnsafeSessionError, UnsafeFileError)
    assert issubclass(UnsafeFileError, PermissionError)


def test_directories_are_made_0700_with_their_parents_and_files_0600(tmp_path: Path) -> None:
    d = pf.ensure_private_dir(tmp_path / "a" / "b")
    assert mode(tmp_path / "a") == 0o700 and mode(d) == 0o700
    pf.write_json(d / "s.json", {"x": [1, 2]})
    assert mode(d / "s.json") == 0o600 and pf.read_json(d / "s.json") == {"x": [1, 2]}
    pf.write_text(d / "t", "hi")
    assert pf.read_text(d / "t") == "hi" and pf.read_bytes(d / "t") == b"hi"
    with pf.open_private(d / "log", "a") as f:
        f.write("one\n")
    with pf.open_private(d / "log", "ab") as f:
        f.write(b"two\n")
    assert mode(d / "log") == 0o600 and (d / "log").read_text() == "one\ntwo\n"
    assert sorted(p.name for p in d.iterdir()) == ["log", "s.json", "t"]  # no temporaries


def test_an_existing_directory_of_this_user_is_tightened(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o755)
    pf.ensure_private_dir(tmp_path / "d")
    assert mode(tmp_path / "d") == 0o700


def test_an_appended_file_is_set_to_0600(tmp_path: Path) -> None:
    (tmp_path / "log").write_text("x")
    (tmp_path / "log").chmod(0o644)
    with pf.open_private(tmp_path / "log", "a") as f:
        f.write("y")
    assert mode(tmp_path / "log") == 0o600


def test_a_failed_atomic_write_leaves_the_old_file(tmp_path: Path) -> None:
    pf.write_text(tmp_path / "f", "old")
    with pytest.raises(RuntimeError), pf.atomic_write(tmp_path / "f") as f:
        f.write(b"new")
        raise RuntimeError("boom")
    assert (tmp_path / "f").read_text() == "old" and os.listdir(tmp_path) == ["f"]
    with pytest.raises(TypeError):
        pf.write_json(tmp_path / "f", {"x": object()})
    assert (tmp_path / "f").read_text() == "old"


def test_a_directory_of_another_user_is_refused_even_when_not_writable(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    give_away(theirs)
    with pytest.raises(UnsafeFileError, match=r"not yours"):
        pf.ensure_private_dir(theirs)
    # Above a directory of ours: its owner could rename ours away and plant another.
    os.mkdir(theirs / "ours", 0o700)
    with pytest.raises(UnsafeFileError, match=r"directory above .*theirs .*another user"):
        pf.ensure_private_dir(theirs / "ours")
    with pytest.raises(UnsafeFileError, match=r"another user"):
        pf.write_text(theirs / "ours" / "f", "x")
    with pytest.raises(UnsafeFileError):
        pf.read_text(theirs / "ours" / "f")


def test_a_writable_directory_above_needs_the_sticky_bit(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeFileError, match=r"without the sticky bit.*chmod \+t"):
        pf.ensure_private_dir(shared / "mine")
    shared.chmod(0o1777)
    assert mode(pf.ensure_private_dir(shared / "mine")) == 0o700


def test_files_of_another_user_or_loose_ones_are_not_read(tmp_path: Path) -> None:
    d = pf.ensure_private_dir(tmp_path / "d")
    (d / "planted.json").write_text("{}")
    give_away(d / "planted.json")
    with pytest.raises(UnsafeFileError, match=r"planted.json .*not yours"):
        pf.read_json(d / "planted.json")
    with pytest.raises(UnsafeFileError, match=r"not yours"):
        pf.open_private(d / "planted.json", "a")
    (d / "loose.json").write_text("{}")
    (d / "loose.json").chmod(0o666)
    with pytest.raises(UnsafeFileError, match=r"chmod go-w"):
        pf.read_json(d / "loose.json")


def test_symlinks_are_refused_when_opened(tmp_path: Path) -> None:
    d = pf.ensure_private_dir(tmp_path / "d")
    pf.write_text(d / "real", "secret")
    os.symlink(d / "real", d / "link")
    for mode_ in ("rb", "a", "w"):
        with pytest.raises(UnsafeFileError, match=r"it is a symlink"):
            pf.open_private(d / "link", mode_)
    assert (d / "real").read_text() == "secret"


def test_not_a_regular_file_and_size_limits(tmp_path: Path) -> None:
    d = pf.ensure_private_dir(tmp_path / "d")
    os.mkfifo(d / "fifo", 0o600)
    with pytest.raises(UnsafeFileError, match=r"not a regular file"):
        pf.open_private(d / "fifo", "a")
    pf.write_bytes(d / "big", b"x" * 100)
    with pytest.raises(ValueError, match=r"larger than 10 bytes"):
        pf.read_bytes(d / "big", max_bytes=10)
    with pytest.raises(FileNotFoundError):
        pf.read_bytes(d / "missing")
    with pytest.raises(ValueError, match=r"mode must be"):
        pf.open_private(d / "big", "r+")


def test_a_symlinked_directory_is_checked_at_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    give_away(target)
    os.symlink(target, tmp_path / "link")
    with pytest.raises(UnsafeFileError):
        pf.ensure_private_dir(tmp_path / "link")
    with pytest.raises(UnsafeFileError):
        pf.ensure_private_dir(tmp_path / "link" / "sub")


def test_a_refusal_names_the_fix_given_and_logs_can_be_unbuffered(tmp_path: Path) -> None:
    d = pf.ensure_private_dir(tmp_path / "d")
    (d / "planted").write_text("{}")
    give_away(d / "planted")
    with pytest.raises(UnsafeFileError, match=r"not yours.*; set provider.cluster_dir"):
        pf.read_json(d / "planted", fix="set provider.cluster_dir")
    with pf.open_private(d / "log", "ab", buffering=0) as f:
        f.write(b"at once")
        assert (d / "log").read_bytes() == b"at once"  # nothing held in a buffer


def test_a_whole_file_can_be_written_in_a_sticky_shared_directory(tmp_path: Path) -> None:
    """As /tmp: root's, 1777. The file is the user's and 0600; others cannot replace it."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    pf.write_bytes(shared / "model.pth", b"weights")
    assert mode(shared / "model.pth") == 0o600 and pf.read_bytes(shared / "model.pth") == b"weights"


def test_a_symlink_on_the_way_has_the_directories_above_its_target_checked(
    tmp_path: Path,
) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "real").mkdir(mode=0o700)
    loose.chmod(0o777)  # no sticky bit: its other users could rename "real" away
    os.symlink(loose / "real", tmp_path / "link")
    with pytest.raises(UnsafeFileError, match=r"without the sticky bit"):
        pf.write_text(tmp_path / "link" / "f", "x")
    with pytest.raises(UnsafeFileError, match=r"without the sticky bit"):
        pf.ensure_private_dir(tmp_path / "link" / "sub")


def test_files_in_a_just_checked_directory_are_still_checked_themselves(
    tmp_path: Path,
) -> None:
    # ancestors_checked skips the walk over the directories above (the caller has just
    # run ensure_private_dir); the file itself is created 0600 and a symlink or another
    # user's file is refused as before.
    d = pf.ensure_private_dir(tmp_path / "d")
    with pf.open_private(d / "log", "a", ancestors_checked=True) as f:
        f.write("line\n")
    pf.write_text(d / "params.json", "{}", ancestors_checked=True)
    assert mode(d / "log") == mode(d / "params.json") == 0o600
    assert pf.read_text(d / "params.json") == "{}"
    assert not [p for p in os.listdir(d) if p.endswith(".tmp")]
    os.symlink(d / "log", d / "link")
    with pytest.raises(UnsafeFileError, match=r"it is a symlink"):
        pf.open_private(d / "link", "a", ancestors_checked=True)
    (d / "planted").write_text("")
    give_away(d / "planted")
    with pytest.raises(UnsafeFileError, match=r"not yours"):
        pf.open_private(d / "planted", "a", ancestors_checked=True)
