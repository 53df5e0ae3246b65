"""trainkit-warm's runtime plugin (entry-point group ``trainkit.runtimes``): core's runtime hooks
(``trainkit/hookspecs.py``). Loaded by every driver and ``trainkit`` command, so it imports nothing
but core's hook marker here: each hook imports what it needs when called."""

from __future__ import annotations

from typing import Any

from trainkit import hookimpl


@hookimpl
def trainkit_hand_off_fit(run: dict) -> Any:
    from trainkit_warm.handoff import hand_off

    return hand_off(run)


@hookimpl
def trainkit_cluster_to_attach() -> str | None:
    from trainkit_warm.attach import cluster_to_attach

    return cluster_to_attach()


@hookimpl
def trainkit_attach_cluster(ray_init_kwargs: dict) -> Any:
    from trainkit_warm.attach import attach

    return attach(ray_init_kwargs)


@hookimpl
def trainkit_claim_workers(count: int, prewarm_modules: tuple[str, ...]) -> list | None:
    from trainkit_warm.spare_workers import claim

    return claim(count, prewarm_modules)


@hookimpl
def trainkit_cli_commands(subcommands: Any) -> None:
    from trainkit_warm.cli import add_commands

    add_commands(subcommands)
