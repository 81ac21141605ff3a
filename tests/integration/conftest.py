"""Shared helpers for the integration tests: they drive the built `wanfw` binary on real configs."""

import functools
import os
from pathlib import Path

import pytest

def read_vector_units(path: Path) -> dict:
    """tests/vector_units.txt: each unit's name and the environment that holds ATen, MKL and oneDNN
    to it in the processes a test starts (wanfw, torchrun's ranks); the unit tests' variants read
    the same file (tests/CMakeLists.txt)."""
    units = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, *settings = line.split()
            units[name] = dict(setting.split("=", 1) for setting in settings)
    return units


VECTOR_UNITS = read_vector_units(Path(__file__).resolve().parent.parent / "vector_units.txt")


@functools.cache
def vector_units():
    """"native" (the processes pick their unit themselves), then every unit of VECTOR_UNITS but the
    one ATen picks here natively, whose run would repeat the native one kernel for kernel.
    WANFW_VECTOR_UNITS (comma-separated, e.g. "native") narrows the list."""
    import torch
    native = torch.backends.cpu.get_cpu_capability().lower()
    units = ["native"] + [unit for unit in VECTOR_UNITS if unit != native]
    chosen = os.environ.get("WANFW_VECTOR_UNITS")
    return tuple(unit for unit in units if unit in chosen.split(",")) if chosen else tuple(units)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "every_vector_unit: the test runs once a vector unit: as the machine chooses, then with ATen, "
                   "MKL and oneDNN held to AVX2 and to their plain kernels in every process it starts (the "
                   "`vector_unit` fixture), so its tolerances hold on every CPU")
    config.addinivalue_line(
        "markers", "own_entry: a long test (torchrun on many ranks, whole trainings) that is a CTest entry of its "
                   "own, run beside the others, instead of part of its concern's entry (tests/CMakeLists.txt)")


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("every_vector_unit"):
        if "vector_unit" not in metafunc.fixturenames:
            metafunc.fixturenames.append("vector_unit")
        metafunc.parametrize("vector_unit", list(vector_units()), indirect=True)


@pytest.fixture
def vector_unit(request, monkeypatch):
    """The unit the processes this test starts run their kernels on ("native": their own choice, and
    what a test not marked every_vector_unit gets when a fixture of its asks)."""
    unit = getattr(request, "param", "native")
    for name, value in VECTOR_UNITS.get(unit, {}).items():
        monkeypatch.setenv(name, value)
    return unit


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "runs"
