"""trainkit-toyfw naming toyfw as a framework distribution of its own (``FRAMEWORK = "toyfw"``), for
the dependency probes: the distribution's metadata (written by the test) declares it or not."""

from trainkit_toyfw import *
from trainkit_toyfw import trainkit_register_backends  # noqa: F401

FRAMEWORK = "toyfw"
