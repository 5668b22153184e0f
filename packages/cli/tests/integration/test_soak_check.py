"""The soak's check (``soak_run.growth``) on made-up samples: it passes what a flat run
samples (workers coming and going included) and names every kind of growth."""

from __future__ import annotations

from dataclasses import replace

from soak_run import MB, Usage, growth

HEAD, OTHER = "/tmp/s/session_head", "/tmp/s/session_other"


def flat() -> dict[str, Usage]:
    return {
        HEAD: Usage(45 * MB, 37, (11 * MB, 16 * MB, 16 * MB)),
        OTHER: Usage(32 * MB, 32, (16 * MB,)),
        "gcs": Usage(70 * MB, 14),
    }


def grown(name: str, **change: int | tuple[int, ...]) -> list[str]:
    """What the check says of a run whose last sample differs from the others in
    ``change`` to ``name``'s usage."""
    last = flat()
    last[name] = replace(last[name], **change)
    return growth([flat(), flat(), last], tolerance=0.25, fd_slack=16, worker_slack=4)


def test_a_flat_run_passes_with_its_actor_workers_coming_and_going() -> None:
    churned = flat()
    churned[HEAD] = Usage(46 * MB, 37, (3 * MB, 16 * MB))  # one just forked, one gone
    assert growth([flat(), churned], tolerance=0.25, fd_slack=16, worker_slack=4) == []


def test_each_kind_of_growth_is_named() -> None:
    assert grown(HEAD, anon=60 * MB) == [f"{HEAD}: RSS 45 -> 60 MB"]
    assert grown("gcs", anon=90 * MB) == ["gcs: RSS 70 -> 90 MB"]
    assert grown(OTHER, fds=50) == [f"{OTHER}: fds 32 -> 50"]
    assert grown(OTHER, workers=(16 * MB,) * 6) == [f"{OTHER}: workers 1 -> 6"]
    assert grown(OTHER, workers=(21 * MB,)) == [f"{OTHER}: largest worker 16 -> 21 MB"]


def test_a_process_gone_or_too_few_samples_fail() -> None:
    last = flat()
    del last["gcs"]
    assert growth([flat(), last], 0.25, 16, 4) == ["gcs is gone"]
    assert growth([flat()], 0.25, 16, 4) == ["fewer than two samples after warm-up: soak longer"]
