"""Shared helpers for the integration tests: they drive the built `wanfw` binary on real configs."""

from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "every_vector_unit: the suite also runs this test with ATen, MKL and oneDNN held to AVX2 and to "
                   "their plain kernels (tests/CMakeLists.txt), so its tolerances hold on every CPU")
    config.addinivalue_line(
        "markers", "own_entry: a long test (torchrun on many ranks, whole trainings) that is a CTest entry of its "
                   "own, run beside the others, instead of part of its module's entry (tests/CMakeLists.txt)")


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "runs"
