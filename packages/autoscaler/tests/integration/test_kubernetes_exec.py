"""The ``kubernetes`` provider's exec runner and the cluster token's Secret, with the
real ``kubernetes`` client and the real ``kubectl`` against the fake API server
(``fake_kubernetes.py``), whose exec endpoint runs each command with bash on this
machine in a directory of the pod's own. Not run against a real cluster here: a real
kubelet, container images and the API server's own exec and RBAC checks are not."""

from __future__ import annotations

import io
import itertools
import os
import shutil
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the [kubernetes] extra is not installed")

from fake_http import FakeAPIServer
from fake_kubernetes import TOKEN, FakeKubernetes, tls_context, write_kubeconfig

from rayfield.autoscaler import commands
from rayfield.autoscaler.autoscaler import node_config, node_tags
from rayfield.autoscaler.command_runner import CommandError
from rayfield.autoscaler.config import prepare_config
from rayfield.autoscaler.launcher_state import SSHClusterProvider
from rayfield.autoscaler.node_provider import (
    KIND_HEAD,
    KIND_WORKER,
    STATUS_UP_TO_DATE,
    TAG_NODE_KIND,
    TAG_NODE_STATUS,
    ProviderError,
    get_node_provider,
)
from rayfield.autoscaler.node_setup import NodeSetup
from rayfield.autoscaler.providers import kubernetes_bootstrap
from rayfield.autoscaler.providers.kubernetes import KubernetesNodeProvider
from rayfield.autoscaler.providers.kubernetes_runner import (
    EXEC_PREFIX,
    KubectlExec,
    KubernetesCommandRunner,
    exec_input,
    exec_status,
    remote_path,
)

_names = itertools.count()
FAKE = FakeKubernetes()
SHELL = {"name": "main", "image": "debian", "command": ["sleep", "infinity"]}
POD = {"spec": {"containers": [SHELL]}, "resources": {"CPU": 1}}
CA: list[str] = []  # the fake API server's certificate (PEM)
TRANSPORTS = ["api", "kubectl"] if shutil.which("kubectl") else ["api"]


@pytest.fixture(scope="module", autouse=True)
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeAPIServer]:
    """The fake API server over HTTPS with its exec endpoint, and $KUBECONFIG naming it
    (kubectl sends the bearer token over HTTPS only)."""
    directory = tmp_path_factory.mktemp("kube")
    tls, ca_pem = tls_context(directory)
    server = FakeAPIServer(FAKE.handle, FAKE.exec_upgrade, tls=tls)
    with server, pytest.MonkeyPatch.context() as mp:
        kubeconfig = write_kubeconfig(directory, server.url, TOKEN, ca_pem)
        CA[:] = [ca_pem]
        mp.setenv("KUBECONFIG", str(kubeconfig))
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        mp.setattr(KubernetesNodeProvider, "running_poll_s", 0.05)
        yield server
    FAKE.close()


def provider(**extra: str) -> KubernetesNodeProvider:
    config = {"type": "kubernetes", "namespace": "rf", **extra}
    p = get_node_provider(config, f"x{next(_names)}")
    assert isinstance(p, KubernetesNodeProvider)
    return p


def new_pod(
    p: KubernetesNodeProvider, manifest: dict | None = None, kind: str = KIND_WORKER
) -> str:
    p.create_node(manifest or POD, {TAG_NODE_KIND: kind}, 1)
    return p.non_terminated_nodes({TAG_NODE_KIND: kind})[-1]


# ---- pure: what an exec sends and how its end is read --------------------------------


def test_exec_status_maps_the_error_channel() -> None:
    assert exec_status(b'{"metadata":{},"status":"Success"}') == (0, "")
    failure = (
        '{"status":"Failure","reason":"NonZeroExitCode",'
        '"details":{"causes":[{"reason":"ExitCode","message":"42"}]}}'
    )
    assert exec_status(failure) == (42, "")
    internal = '{"status":"Failure","reason":"InternalError","message":"no bash in PATH"}'
    assert exec_status(internal) == (255, "exec failed: no bash in PATH")
    assert exec_status(b"")[0] == 255  # the connection ended before the status
    assert exec_status(b"<html>")[0] == 255


def test_the_command_and_env_travel_on_stdin_not_argv() -> None:
    argv, stdin = exec_input("export RAYFIELD_TOKEN=s3cret\ntrue\n", b"PAYLOAD")
    assert argv == [*EXEC_PREFIX, str(len(b"export RAYFIELD_TOKEN=s3cret\ntrue\n"))]
    assert stdin.endswith(b"PAYLOAD") and b"s3cret" in stdin
    assert not any("s3cret" in a for a in argv)


def test_remote_paths_are_quoted_with_home_expanded() -> None:
    assert remote_path("~") == '"$HOME"'
    assert remote_path("~/a b/c") == "\"$HOME\"/'a b/c'"
    assert remote_path("/x/$(rm -rf ~)") == "'/x/$(rm -rf ~)'"
    assert remote_path("rel'q") == "'rel'\"'\"'q'"


def test_kubectl_command_line() -> None:
    t = KubectlExec("ns", "pod-1", "main")
    assert t.command(["bash", "-c", "x"]) == [
        "kubectl", "exec", "-i", "-n", "ns", "pod-1", "-c", "main", "--", "bash", "-c", "x",
    ]  # fmt: skip
    assert "-c" not in KubectlExec("ns", "p", None).command(["true"])[:-1]


def test_an_unknown_transport_is_a_provider_error() -> None:
    with pytest.raises(ProviderError, match="api"):
        provider(command_runner="ssh").command_runner("some-pod")


def test_a_missing_kubectl_is_a_command_error() -> None:
    runner = KubernetesCommandRunner(
        "rf", "p", transport=KubectlExec("rf", "p", None, "no-kubectl")
    )
    with pytest.raises(CommandError, match="not on PATH"):
        runner.run("true")


# ---- through the exec endpoint, with the client and with kubectl ----------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_run_and_output_in_a_pod(transport: str) -> None:
    p = provider(command_runner=transport)
    pod = new_pod(p)
    runner = p.command_runner(pod)
    tricky = "a b'c\"d $(touch /tmp/rf-should-not-exist) `x`\nline2"
    env = {"RAYFIELD_TOKEN": "tok-" + "9" * 60, "TRICKY": tricky}
    before = len(FAKE.execs)
    assert runner.output('printf %s "$TRICKY"', env) == tricky
    assert runner.output("pwd").strip() == FAKE.pod_home("rf", pod)  # starts in $HOME
    log = io.BytesIO()
    assert runner.run("echo out; echo err >&2; exit 3", env, log) == 3
    assert b"out\nerr\n" in log.getvalue()  # stderr joins stdout in the log
    assert runner.run("cat", log=log, timeout_s=20) == 0  # stdin is /dev/null: no hang
    with pytest.raises(CommandError, match="exited 7"):
        runner.output("echo oops >&2; exit 7")
    # neither the token nor the commands are on the exec's command line (the URL)
    assert all(argv[:4] == list(EXEC_PREFIX) for argv in FAKE.execs[before:])
    assert not any("tok-" in " ".join(argv) for argv in FAKE.execs[before:])
    assert not os.path.exists("/tmp/rf-should-not-exist")
    p.terminate_node(pod)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_missing_pod_is_status_255_with_the_reason(transport: str) -> None:
    runner = provider(command_runner=transport).command_runner("no-such-pod")
    log = io.BytesIO()
    assert runner.run("true", log=log) == 255
    assert b"404" in log.getvalue() or b"NotFound" in log.getvalue()
    with pytest.raises(CommandError, match="255"):
        runner.output("true")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_files_round_trip_through_tar(transport: str, tmp_path: Path) -> None:
    p = provider(command_runner=transport)
    pod = new_pod(p)
    runner = p.command_runner(pod)
    src = tmp_path / "src"
    (src / "sub dir").mkdir(parents=True)
    (src / "sub dir" / "data.bin").write_bytes(bytes(range(256)) * 40)
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "old.txt").write_text("old")
    runner.sync_up(str(src), "~/app")
    home = Path(FAKE.pod_home("rf", pod))
    assert (home / "app" / "sub dir" / "data.bin").read_bytes() == bytes(range(256)) * 40
    assert os.access(home / "app" / "run.sh", os.X_OK)
    # a second copy replaces the directory's contents (a removed file goes)
    (src / "old.txt").unlink()
    runner.sync_up(str(src), "~/app")
    assert not (home / "app" / "old.txt").exists()
    assert not list(home.glob("app.rfsync.*"))
    # a single file, into a directory that does not exist yet
    one = tmp_path / "one.yaml"
    one.write_text("a: 1\n")
    runner.sync_up(str(one), "conf/cluster.yaml")
    assert (home / "conf" / "cluster.yaml").read_text() == "a: 1\n"
    # and back down
    runner.sync_down("~/app", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub dir" / "data.bin").read_bytes() == bytes(range(256)) * 40
    runner.sync_down("conf/cluster.yaml", str(tmp_path / "c.yaml"))
    assert (tmp_path / "c.yaml").read_text() == "a: 1\n"
    with pytest.raises(CommandError, match="failed"):
        runner.sync_down("~/missing", str(tmp_path / "nothing"))
    p.terminate_node(pod)


# ---- the cluster token: a Secret the worker pods read ----------------------------------


def cluster_config(name: str, **provider_extra: str) -> dict:
    manifest = {"spec": {"containers": [SHELL]}}
    return prepare_config(
        {
            "cluster_name": name,
            "provider": {"type": "kubernetes", "namespace": "rf", **provider_extra},
            "max_workers": 1,
            "head_node": manifest,
            "worker_nodes": manifest,
        }
    )


def test_worker_pods_read_the_token_from_the_clusters_secret(kube_api: FakeAPIServer) -> None:
    name = f"x{next(_names)}"
    cfg = KubernetesNodeProvider.bootstrap_config(cluster_config(name))
    secret = kubernetes_bootstrap.token_secret_name(name)
    head_env = cfg["available_node_types"][cfg["head_node_type"]]["node_config"]["spec"]
    assert "env" not in head_env["containers"][0]  # the head makes the token
    (worker_env,) = cfg["available_node_types"]["worker"]["node_config"]["spec"]["containers"]
    assert worker_env["env"] == [
        {"name": "RAYFIELD_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}}
    ]
    p = get_node_provider(cfg["provider"], name)
    token = "ab" * 32
    p.publish_token(token)
    stored = FAKE.objects[("secrets", "rf", secret)]
    assert FAKE.secret_value("rf", secret, "token") == token
    p.create_node(node_config(cfg, "worker"), node_tags(cfg, "worker", False), 1)
    (worker,) = p.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})
    assert p.command_runner(worker).output('printf %s "$RAYFIELD_TOKEN"') == token
    # nowhere in the pod's labels, annotations or command, nor in the Secret's labels
    pod = FAKE.pods[("rf", worker)]
    assert token not in str(pod["metadata"]) and token not in str(pod["spec"])
    assert token not in str(stored["metadata"])
    # a new head's token replaces it; publishing the same one again changes nothing
    p.publish_token("cd" * 32)
    assert FAKE.secret_value("rf", secret, "token") == "cd" * 32
    # the head's account may exec into pods but not read the Secret
    account = kubernetes_bootstrap.account_name(name)
    as_head = FAKE.token_for("rf", account)
    assert status_of_get(f"{kube_api.url}/api/v1/namespaces/rf/secrets/{secret}", as_head) == 403
    p.terminate_node(worker)
    p.remove_cluster()
    assert ("secrets", "rf", secret) not in FAKE.objects
    p.remove_cluster()  # already gone: not an error


def status_of_get(url: str, token: str) -> int:
    """The HTTP status of a GET with ``token`` as the bearer token."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    trust = ssl.create_default_context(cadata=CA[0])
    try:
        with urllib.request.urlopen(req, context=trust) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


# ---- the launcher: NodeSetup over the exec API, the token stored, `down` ---------------

FAKE_HEAD_START = (
    'd="$RAYFIELD_NODE_TEMP_DIR/session_2026_01_01"; mkdir -p "$d" && '
    'echo \'{"node_id": "aa01"}\' > "$d/node.json" && '
    'echo \'{"gcs_address": "10.1.0.9:6379"}\' > "$d/cluster.json" && '
    'echo "$HEAD_TOKEN" > "$d/token"'
)


def test_the_launcher_sets_pods_up_over_exec_and_down_removes_the_secret(tmp_path: Path) -> None:
    transport = "api"  # kubectl runs the same scripts (the tests above)
    name = f"x{next(_names)}"
    mounted = tmp_path / "code"
    mounted.mkdir()
    (mounted / "job.py").write_text("print('hi')\n")
    cfg = cluster_config(name, command_runner=transport, cluster_dir=str(tmp_path / "state"))
    token = "ef" * 32
    cfg["file_mounts"] = {"~/code": str(mounted)}
    cfg["setup_commands"] = ["test -f ~/code/job.py"]
    cfg["head_start_ray_commands"] = [f"HEAD_TOKEN={token}; {FAKE_HEAD_START}"]
    worker_session = (
        'd="$RAYFIELD_NODE_TEMP_DIR/session_2026_01_01"; mkdir -p "$d" && '
        'echo \'{"node_id": "bb02"}\' > "$d/node.json"'
    )
    cfg["worker_start_ray_commands"] = [f'test "$RAYFIELD_TOKEN" = {token}', worker_session]
    cfg = KubernetesNodeProvider.bootstrap_config(cfg)
    wrapped = commands.provider_for(cfg)
    assert isinstance(wrapped, SSHClusterProvider) and wrapped.runs_commands
    setup = NodeSetup(cfg, wrapped)  # no auth section: no SSH key needed
    assert setup.key is None
    head_type = cfg["head_node_type"]
    wrapped.create_node(node_config(cfg, head_type), node_tags(cfg, head_type, True), 1)
    head = wrapped.head_id()
    setup.update(head)
    assert wrapped.node_tags(head)[TAG_NODE_STATUS] == STATUS_UP_TO_DATE
    assert wrapped.token(head) == token and wrapped.gcs_address(head) == "10.1.0.9:6379"
    secret = kubernetes_bootstrap.token_secret_name(name)
    assert FAKE.secret_value("rf", secret, "token") == token
    log = setup.log_path(head).read_text()
    assert token not in log.replace(f"HEAD_TOKEN={token}", "")  # only the config's own line
    # a worker: set up over exec, its start command sees the token (from the Secret and
    # from the launcher's stdin script)
    wrapped.create_node(node_config(cfg, "worker"), node_tags(cfg, "worker", False), 1)
    (worker,) = wrapped.non_terminated_nodes({TAG_NODE_KIND: KIND_WORKER})
    setup.update(worker)
    assert wrapped.cluster_node_id(worker) == "bb02"
    assert token not in setup.log_path(worker).read_text().replace(f"= {token}", "")
    assert commands.teardown(cfg) == 2
    assert wrapped.non_terminated_nodes({}) == []
    assert ("secrets", "rf", secret) not in FAKE.objects
    for node_ip in ("10.1.0", ""):  # the fake session the head's command wrote
        for d in Path("/tmp").glob(f"rayfield-{name}-{node_ip}*"):
            shutil.rmtree(d, ignore_errors=True)


def test_attach_needs_ssh_and_says_to_use_kubectl() -> None:
    from rayfield.autoscaler import remote

    name = f"x{next(_names)}"
    cfg = KubernetesNodeProvider.bootstrap_config(cluster_config(name))
    wrapped = commands.provider_for(cfg)
    setup = NodeSetup(cfg, wrapped)
    wrapped.create_node(node_config(cfg, cfg["head_node_type"]), {TAG_NODE_KIND: KIND_HEAD}, 1)
    head = wrapped.head_id()
    with pytest.raises(commands.LauncherError, match="kubectl exec -it"):
        remote._ssh_runner(setup, head, "attach")
    wrapped.terminate_node(head)
