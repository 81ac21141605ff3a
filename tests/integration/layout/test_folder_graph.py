"""The build enforces the folder graphs of core/src and of libs/' libraries: a unit that includes a
header of a folder its own folder does not use fails to compile, with the compiler's own words,
while the same unit with an include of a folder it does use compiles. Each case compiles a scratch
copy of a real unit with the exact command the build uses for it (compile_commands.json; in a unity
build, the command of its folder's batch, whose flags are the unit's)."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.runs import BUILD, SOURCE

CORE_UNIT = (SOURCE / "core" / "src" / "plan" / "lr_schedule.cpp", "wanfw_core_plan")  # plan/ uses config/ alone
# libs/wan_dit's network/ uses kernels/ alone.
LIB_UNIT = (SOURCE / "libs" / "wan_dit" / "network" / "src" / "wan_config.cpp", "wanfw_wan_dit_network")


def compile_scratch(tmp_path: Path, unit: tuple[Path, str], extra_include: str) -> subprocess.CompletedProcess:
    """Compiles a copy of the unit with `#include "<extra_include>"` on top, as the build compiles it."""
    path, target = unit
    entries = json.loads((BUILD / "compile_commands.json").read_text())
    batch = f"/{target}.dir/Unity/"
    entry = next(e for e in entries if Path(e["file"]).resolve() == path.resolve() or batch in e["file"])
    scratch = tmp_path / path.name
    scratch.write_text(f'#include "{extra_include}"\n' + path.read_text())
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    assert entry["file"] in args
    args = [str(scratch) if a == entry["file"] else a for a in args]
    out = args.index("-o")
    args[out + 1] = str(tmp_path / "scratch.o")
    args.append("-fsyntax-only")
    return subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True, timeout=300)


# (unit, a header of a folder its folder does not use, a header of one it uses)
CASES = {"core": (CORE_UNIT, "train/trainer.hpp", "config/core_sections.hpp"),
         "libs": (LIB_UNIT, "wan/lora.hpp", "wan/block_ops.hpp")}


@pytest.mark.parametrize("tree", CASES)
def test_including_a_folder_the_unit_does_not_use_fails_to_compile(tmp_path, tree):
    unit, undeclared, _ = CASES[tree]
    result = compile_scratch(tmp_path, unit, undeclared)
    assert result.returncode != 0
    assert f"{undeclared}: No such file or directory" in result.stderr


@pytest.mark.parametrize("tree", CASES)
def test_the_same_unit_including_a_folder_it_uses_compiles(tmp_path, tree):
    unit, _, declared = CASES[tree]
    result = compile_scratch(tmp_path, unit, declared)
    assert result.returncode == 0, result.stderr
