"""trainkit-toyfw with a mistake at load: its entry point turns warnings off for the whole process."""

import warnings

from trainkit_toyfw_fw import *
from trainkit_toyfw_fw import FRAMEWORK, trainkit_register_backends  # noqa: F401

warnings.simplefilter("ignore")  # the mistake: every warning of the user's process is gone
