"""Shared helpers for the integration tests: they drive the built `wanfw` binary on real configs."""

from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "every_vector_unit: the suite also runs this test with ATen, MKL and oneDNN held to AVX2 and to "
                   "their plain kernels (tests/CMakeLists.txt), so its tolerances hold on every CPU")


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "runs"
