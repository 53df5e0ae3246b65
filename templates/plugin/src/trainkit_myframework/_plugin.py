"""Entry point of trainkit-myframework: registers the backend. Must not import the framework:
every ``import trainkit`` that loads plugins runs this module."""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_myframework.config import MyFrameworkConfig

# The distribution of your framework: the plugin is skipped, with a reason, when it is missing or
# outside the range this distribution's pyproject declares.
FRAMEWORK = "TODO-framework-distribution"  # TODO: e.g. "torch"; the plugin's name is replaced, not this


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_myframework.trainer import MyFrameworkTrainer

    registry.register("myframework", MyFrameworkConfig, MyFrameworkTrainer)
