"""Test-wide settings. Under CI=true hypothesis is derandomized, so a CI run is reproducible and
a landing never hinges on luck; local runs explore new examples every time."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")
