"""Another local user, a copied experiment or a REST client gets nothing Tune should keep.

(a) and (b): the attacker is a real second user (``useradd``, see
:func:`rayfield.testing.second_user`) who listens on a loopback port and writes down every
request it gets. A ``TuneClient`` of this process's user (root on CI), with the cluster's
token in ``$RAYFIELD_TOKEN``, talks to that port (a) directly and (b) through a
``.tune_server.json`` the attacker planted in a directory of a 1777 stand-in for ``/tmp``:
the token must never reach the attacker, and the planted file must be refused.

(c): an experiment copied from elsewhere (owned by this user: the copy is theirs) holds
pickles whose loading writes a marker file: ``params.pkl``, an old ``.tune_metadata`` and
``checkpoint_dict.pkl``. ``tune ls``, ``ExperimentAnalysis``, ``tune.run(resume=True)``
and ``Trainable.restore`` must never load them: they read JSON, or raise an error naming
the file and ``trusted=True``.

(d): bodies with code, paths outside the experiment, huge sizes and deep JSON sent to the
REST server are all answered 4xx, and it goes on serving.

Making a user needs root and ``useradd``/``runuser``: without them (a) and (b) FAIL, unless
``RAYFIELD_TESTS_NO_SECOND_USER=1`` says the run knowingly goes without it.
"""

from __future__ import annotations

import http.client
import json
import os
import pickle
import pwd
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rayfield import tune
from rayfield.exceptions import UnsafeFileError
from rayfield.testing import run_as, wait_for
from rayfield.tune.cli import cli
from rayfield.tune.pickles import UntrustedPickleError
from rayfield.tune.state import STATE_FILE, load_state
from rayfield.tune.trial import Trial
from rayfield.tune.web_server import TOKEN_FILE, TuneClient, TuneServer

CLUSTER_TOKEN = "c1u5ter" * 9  # what $RAYFIELD_TOKEN holds in (a) and (b)

# Runs as the attacker, with the system Python (stdlib only): answers every request 401
# after writing it down, request line and headers, in <shared>/attacker/requests.
LISTEN = textwrap.dedent("""
    import os, socket, sys, threading
    shared = sys.argv[1]
    log = os.path.join(shared, "attacker", "requests")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve():
        while True:
            conn, _ = server.accept()
            conn.settimeout(10)
            data = b""
            try:
                while b"\\r\\n\\r\\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            with open(log, "ab") as f:
                f.write(data + b"\\n----\\n")
            conn.sendall(b"HTTP/1.0 401 Unauthorized\\r\\nContent-Length: 2\\r\\n\\r\\n{}")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    print(server.getsockname()[1], flush=True)
    sys.stdin.read()  # until the test closes stdin
""")

# Runs as the attacker: a directory in the shared /tmp naming its listener.
PLANT = textwrap.dedent("""
    import json, os, sys
    shared, port = sys.argv[1], sys.argv[2]
    os.umask(0)
    exp = os.path.join(shared, "exp")
    os.mkdir(exp, 0o777)
    with open(os.path.join(exp, ".tune_server.json"), "w") as f:
        json.dump({"address": "127.0.0.1:" + port, "token_source": "cluster"}, f)
""")


@pytest.fixture
def attacker(
    rayfield_second_user: pwd.struct_passwd, rayfield_shared_tmp: Path
) -> Iterator[tuple[int, Path]]:
    """The attacker's listener: its port, and the file where it writes what it gets."""
    (rayfield_shared_tmp / "attacker").mkdir(mode=0o777)
    os.chown(rayfield_shared_tmp / "attacker", rayfield_second_user.pw_uid, -1)
    listen = run_as(
        rayfield_second_user.pw_name,
        LISTEN,
        str(rayfield_shared_tmp),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert listen.stdout is not None
        port = listen.stdout.readline().strip()
        assert port.isdigit(), "the attacker did not start"
        yield int(port), rayfield_shared_tmp / "attacker" / "requests"
    finally:
        assert listen.stdin is not None
        listen.stdin.close()
        listen.wait(timeout=10)


def test_a_listener_on_the_clients_address_never_gets_the_cluster_token(attacker, monkeypatch):
    port, requests = attacker
    monkeypatch.setenv("RAYFIELD_TOKEN", CLUSTER_TOKEN)
    with pytest.raises(tune.TuneError, match="401"):
        TuneClient(f"127.0.0.1:{port}").get_all_trials()
    got = wait_for(lambda: requests.exists() and requests.read_text(), 10, "the request")
    assert "GET /trials" in got  # it did reach the attacker...
    assert CLUSTER_TOKEN not in got and "authorization" not in got.lower()  # ...with no token


def test_a_server_file_planted_by_another_user_is_refused(
    attacker, rayfield_second_user, rayfield_shared_tmp, monkeypatch
):
    port, requests = attacker
    plant = run_as(rayfield_second_user.pw_name, PLANT, str(rayfield_shared_tmp), str(port))
    assert plant.wait(timeout=30) == 0
    planted = rayfield_shared_tmp / "exp" / TOKEN_FILE
    assert os.stat(planted).st_uid == rayfield_second_user.pw_uid
    monkeypatch.setenv("RAYFIELD_TOKEN", CLUSTER_TOKEN)
    with pytest.raises(UnsafeFileError, match=r"refusing .*exp"):
        TuneClient.from_experiment_dir(str(rayfield_shared_tmp / "exp")).get_all_trials()
    assert not requests.exists(), f"a request reached the attacker:\n{requests.read_text()}"


# ---- (c) pickles in a copied experiment -------------------------------------------------


class Marker:
    """A pickle whose loading writes ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "unpickled"))


class Saver(tune.Trainable):
    def setup(self, config):
        self.value = config["v"]

    def step(self):
        return {"score": self.value, "done": self.iteration >= 1}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


@pytest.fixture(scope="module")
def experiment(cluster, tmp_path_factory) -> Path:
    """A real experiment of one trial with a dict checkpoint, run here once."""
    root = tmp_path_factory.mktemp("made")
    tune.run(Saver, name="exp", config={"v": 3}, local_dir=str(root), checkpoint_freq=1, verbose=0)
    return root / "exp"


def _copy(experiment: Path, tmp_path: Path, marker: Path, *, config: bool, ckpt: bool) -> Path:
    """A copy of ``experiment`` whose trial is RUNNING again, with ``params.pkl`` (when
    ``config``) and the checkpoints' Tune files (when ``ckpt``) replaced by pickles that
    write ``marker`` when loaded."""
    copy = tmp_path / "copied" / "exp"
    shutil.copytree(experiment, copy)
    state = load_state(str(copy))
    assert state is not None
    for trial in state["trials"]:
        trial["status"] = Trial.RUNNING
        trial["config_pickled"] = config
    state.pop("finished", None)
    (copy / STATE_FILE).write_text(json.dumps(state))
    (copy / "finished_trials.jsonl").unlink(missing_ok=True)
    evil = pickle.dumps(Marker(marker))
    for trial_dir in (p for p in copy.iterdir() if p.is_dir()):
        if config:
            (trial_dir / "params.pkl").write_bytes(evil)
        for ckpt_dir in trial_dir.glob("checkpoint_*"):
            if ckpt:
                for name in (".tune_metadata.json", "checkpoint_dict.json"):
                    (ckpt_dir / name).unlink(missing_ok=True)
                (ckpt_dir / ".tune_metadata").write_bytes(evil)
                (ckpt_dir / "checkpoint_dict.pkl").write_bytes(evil)
    return copy


def test_tune_ls_and_analysis_of_a_copied_experiment_load_no_pickle(experiment, tmp_path):
    marker = tmp_path / "marker"
    copy = _copy(experiment, tmp_path, marker, config=True, ckpt=True)
    out = CliRunner().invoke(cli, ["ls", str(copy), "--columns", "trial_id,status,score"])
    assert out.exit_code == 0, out.output
    assert "PENDING" in out.output  # read back: a RUNNING trial would run again
    [trial] = tune.ExperimentAnalysis(str(copy))
    assert trial.config == {"v": 3}  # the JSON copy
    assert not marker.exists(), "a pickle of the copied experiment was loaded"


def test_resume_of_a_copied_experiment_refuses_its_config_pickle(experiment, tmp_path):
    marker = tmp_path / "marker"
    copy = _copy(experiment, tmp_path, marker, config=True, ckpt=False)
    with pytest.raises(UntrustedPickleError, match=r"params\.pkl holds a pickle.*trusted=True"):
        tune.run(Saver, name="exp", local_dir=str(copy.parent), resume=True, verbose=0)
    assert not marker.exists(), "a pickle of the copied experiment was loaded"


def test_resume_and_restore_refuse_a_copied_checkpoints_pickles(experiment, tmp_path):
    marker = tmp_path / "marker"
    copy = _copy(experiment, tmp_path, marker, config=False, ckpt=True)
    with pytest.raises(UntrustedPickleError, match=r"\.tune_metadata holds a pickle.*trusted"):
        tune.run(Saver, name="exp", local_dir=str(copy.parent), resume=True, verbose=0)
    ckpt = sorted(copy.glob("*/checkpoint_*"))[-1]
    with pytest.raises(UntrustedPickleError, match=r"Trainable\.restore\(path, trusted=True\)"):
        Saver({"v": 0}, trial_info={"logdir": str(tmp_path / "t")}).restore(str(ckpt))
    (ckpt / ".tune_metadata").unlink()  # only the dict is a pickle now
    (ckpt / ".tune_metadata.json").write_text(
        json.dumps(
            {
                "experiment_id": "e",
                "iteration": 1,
                "timesteps_total": None,
                "time_total": 0.1,
                "episodes_total": None,
                "saved_as_dict": True,
                "relpath": None,
            }
        )
    )
    with pytest.raises(UntrustedPickleError, match=r"checkpoint_dict\.pkl holds a pickle"):
        Saver({"v": 0}, trial_info={"logdir": str(tmp_path / "t")}).restore(str(ckpt))
    assert not marker.exists(), "a pickle of the copied experiment was loaded"


# ---- (d) the REST server takes data only ------------------------------------------------


class OneTrial:
    trial = Trial("noop", {"a": 1}, trial_id="t1")

    def get_trials(self) -> list[Trial]:
        return [self.trial]

    def get_trial(self, trial_id: str) -> Trial | None:
        return self.trial if trial_id == "t1" else None


def noop(config):
    tune.report(x=1)


@pytest.fixture
def served(tmp_path) -> Iterator[TuneServer]:
    tune.register_trainable("noop", noop)
    server = TuneServer(OneTrial(), str(tmp_path / "exp"), 0, token="t0ken")
    yield server
    server.shutdown()


def _send(
    server: TuneServer, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """POST ``body`` to /trials as raw bytes; (status, text), or (0, why) when the
    server answered nothing."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        conn.putrequest("POST", "/trials")
        sent = {"Authorization": "Bearer t0ken", "Content-Length": str(len(body))}
        for key, value in {**sent, **(headers or {})}.items():
            conn.putheader(key, value)
        conn.endheaders()
        conn.send(body)
        response = conn.getresponse()
        return response.status, response.read().decode()
    except (OSError, http.client.HTTPException) as exc:
        return 0, f"no answer: {exc!r}"
    finally:
        conn.close()


def _spec(spec: dict, name: str = "more") -> bytes:
    return json.dumps({"name": name, "spec": {"run": "noop", **spec}}).encode()


def test_the_rest_server_answers_code_paths_sizes_and_depth_with_4xx(served, tmp_path):
    marker = tmp_path / "evaluated"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    cases = {
        "eval in config": (_spec({"config": {"x": {"eval": code}}}), {}),
        "eval nested in a grid": (
            _spec({"config": {"x": {"grid_search": [{"eval": code}]}}}),
            {},
        ),
        "a sync command": (
            _spec({"upload_dir": "file:///tmp/x", "sync_function": f"touch {marker}"}),
            {},
        ),
        "a name with ..": (_spec({}, name="../../escape"), {}),
        "a name with /": (_spec({}, name="a/b"), {}),
        "local_dir outside": (_spec({"local_dir": str(tmp_path / "elsewhere")}), {}),
        "local_dir climbing out": (_spec({"local_dir": "../.."}), {}),
        "restore outside": (_spec({"restore": "/etc"}), {}),
        "too many samples": (_spec({"num_samples": 20_000}), {}),
        "too big a grid": (
            _spec({"num_samples": 100, "config": {"x": {"grid_search": list(range(200))}}}),
            {},
        ),
        "an empty grid": (_spec({"config": {"x": {"grid_search": []}}}), {}),
        "a huge body": (_spec({"config": {"pad": "x" * (2 << 20)}}), {}),
        "a lying huge Content-Length": (b"{}", {"Content-Length": str(10**12)}),
        "a negative Content-Length": (b"{}", {"Content-Length": "-1"}),
        "deep JSON": (b"[" * 100_000 + b"]" * 100_000, {}),
        "deep but parseable JSON": (
            _spec({"config": {"x": json.loads("[" * 200 + "]" * 200)}}),
            {},
        ),
        "not JSON": (b"{nope", {}),
        "not an object": (b"[1, 2]", {}),
    }
    problems = []
    for what, (body, headers) in cases.items():
        status, text = _send(served, body, headers)
        if not 400 <= status < 500:
            problems.append(f"{what}: {status} {text[:200]}")
        elif "Traceback" in text:
            problems.append(f"{what}: a traceback in the answer: {text[:500]}")
    status, text = _send(served, b"x" * (2 << 20))
    if status != 413:
        problems.append(f"a 2 MiB body: {status} {text[:200]}, not 413")
    assert not problems, "\n".join(problems)
    assert not marker.exists(), "code from a request ran"
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path.parent / "escape").exists()
    # It still serves, and a plain spec still adds trials inside the experiment.
    client = TuneClient(f"127.0.0.1:{served.port}", token="t0ken")
    assert client.get_trial("t1")["id"] == "t1"
    assert len(client.add_trial("more", {"run": "noop", "config": {"a": 2}})) == 1
    kind, added = served._requests.get_nowait()
    assert kind == "add" and added.logdir.startswith(str(tmp_path / "exp" / "more") + os.sep)
