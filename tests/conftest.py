from __future__ import annotations

import os
from pathlib import Path

import pytest

from slicemeter.broker import TansuBroker

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture
def broker(tmp_path):
    """A fresh Tansu broker per test (memory storage: nothing leaks between tests)."""
    with TansuBroker(log_path=tmp_path / "tansu.log") as b:
        yield b


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
