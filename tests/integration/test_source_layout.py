"""The source tree keeps its shape: core/src's folders depend one way, files stay small, and
every plugin's entry file is where plugins/README.md says."""

import re
import shutil
from pathlib import Path

from conftest import SOURCE
from source_layout import check

MAX_LINES = 300


def core_folders() -> list[str]:
    text = (SOURCE / "core" / "CMakeLists.txt").read_text()
    return re.search(r"set\(WANFW_CORE_FOLDERS ([^)]*)\)", text).group(1).split()


def test_core_folders_include_only_lower_ones():
    folders = core_folders()
    assert len(folders) >= 8
    assert check(SOURCE, folders) == []


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_layout_check_names_an_upward_include_a_bare_include_and_a_plugin_reaching_into_core(tmp_path):
    for folder in ("low", "high"):
        write(tmp_path / "core/src" / folder / "README.md", "# index\n")
    write(tmp_path / "core/src/high/top.hpp", "#pragma once\n")
    write(tmp_path / "core/src/low/base.hpp", "#pragma once\n")
    write(tmp_path / "core/src/low/base.cpp", '#include "low/base.hpp"\n#include "high/top.hpp"\n')
    write(tmp_path / "core/src/high/top.cpp", '#include "base.hpp"\n')
    write(tmp_path / "plugins/kind/thing/plugin.cpp", '#include "low/base.hpp"\n#include "wanfw/plugin.hpp"\n')
    problems = check(tmp_path, ["low", "high"])
    assert problems == [
        'core/src/low/base.cpp: includes "high/top.hpp", but high/ comes after low/ (order: low < high)',
        'core/src/high/top.cpp: includes "base.hpp" without its folder ("low/base.hpp")',
        'plugins/kind/thing/plugin.cpp: includes core/src\'s "low/base.hpp"; plugins and their libraries '
        "build on the SDK (core/include) alone",
    ]


def test_layout_check_names_a_loose_file_a_missing_index_and_a_crowded_folder(tmp_path):
    write(tmp_path / "core/src/loose.cpp", "")
    for i in range(17):
        write(tmp_path / f"core/src/only/part_{i:02}.cpp", "")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "libs").mkdir()
    problems = check(tmp_path, ["only"])
    assert problems == [
        "core/src/loose.cpp: outside core/src's folders (only)",
        "core/src/only: 17 source files; at most 16 (split the subsystem)",
        "core/src/only: no README.md (what it defines, what it depends on)",
    ]


def test_no_source_file_is_longer_than_300_lines():
    long = []
    for top in ("core", "plugins", "libs", "apps", "tools", "tests", "bench", "scripts", "examples"):
        for path in sorted((SOURCE / top).rglob("*")):
            if path.suffix in {".cpp", ".hpp", ".py"} and path.is_file() and "corpus" not in path.parts:
                lines = path.read_text(errors="replace").count("\n")
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(SOURCE)}: {lines} lines")
    assert long == []


def test_every_plugin_folder_has_its_entry_in_plugin_cpp():
    """plugins/<kind>/<name>/plugin.cpp carries WANFW_PLUGIN, and no other file of plugins/ does."""
    entries = sorted(p.relative_to(SOURCE).as_posix() for p in (SOURCE / "plugins").rglob("*.cpp")
                     if "WANFW_PLUGIN(" in p.read_text())
    folders = sorted(p.parent.relative_to(SOURCE).as_posix() for p in (SOURCE / "plugins").glob("*/*/CMakeLists.txt"))
    assert entries == [f"{folder}/plugin.cpp" for folder in folders]
    assert len(entries) >= 10
