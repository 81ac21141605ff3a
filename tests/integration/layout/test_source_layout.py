"""The source tree keeps its shape: core/src's folders include only the folders they use (the graph
core/CMakeLists.txt declares and the build enforces), files stay small, plugins log through the
SDK, every plugin's entry file is where plugins/README.md says, the docs and comments name only
files that exist, and the test modules share helpers through harness/ alone."""

import ast
import subprocess
from pathlib import Path

import named_paths
from library_layout import check_libraries, library_folders
from source_layout import check, folder_graph, folder_problems

from harness.runs import SOURCE

MAX_LINES = 300


def core_graph() -> dict[str, list[str]]:
    return folder_graph((SOURCE / "core" / "CMakeLists.txt").read_text())


def test_core_folders_include_only_the_folders_they_use_and_their_readmes_say_so():
    graph = core_graph()
    assert len(graph) >= 12
    assert "process_group" in graph and "distributed" not in graph
    assert check(SOURCE, graph) == []


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_layout_check_names_an_undeclared_include_one_reached_through_a_header_and_a_bare_include(tmp_path):
    write(tmp_path, {
        "core/src/low/README.md": "Depends on: no other folder.\n",
        "core/src/mid/README.md": "Depends on: `low/`.\n",
        "core/src/high/README.md": "Depends on: mid/.\n",
        "core/src/high/top.hpp": "#pragma once\n",
        "core/src/low/base.hpp": "#pragma once\n",
        "core/src/low/base.cpp": '#include "low/base.hpp"\n#include "high/top.hpp"\n',
        "core/src/mid/middle.hpp": '#pragma once\n#include "low/base.hpp"\n',
        "core/src/high/top.cpp": '#include "mid/middle.hpp"\n#include "base.hpp"\n',
        "plugins/kind/thing/plugin.cpp": '#include "low/base.hpp"\n#include <spdlog/spdlog.h>\n#include "wanfw/plugin.hpp"\n',
    })
    problems = check(tmp_path, {"low": [], "mid": ["low"], "high": ["mid"]})
    assert problems == [
        'core/src/low/base.cpp: includes "high/top.hpp", but low/ does not use high/ '
        "(core/CMakeLists.txt: wanfw_core_folder(low))",
        'core/src/high/top.cpp: includes "mid/middle.hpp", which reaches "low/base.hpp", but high/ does not use low/ '
        "(core/CMakeLists.txt: wanfw_core_folder(high USES mid))",
        'core/src/high/top.cpp: includes "base.hpp" without its folder ("low/base.hpp")',
        'plugins/kind/thing/plugin.cpp: includes core/src\'s "low/base.hpp"; plugins and their libraries build on the '
        "SDK (core/include) alone",
        "plugins/kind/thing/plugin.cpp: uses spdlog; plugins and their libraries log through wanfw/log.hpp "
        "(the host's level and rank rule)",
    ]


def test_layout_check_names_an_unused_use_a_use_declared_later_and_a_readme_that_disagrees(tmp_path):
    write(tmp_path, {
        "core/src/low/README.md": "Depends on: high/.\n",
        "core/src/high/README.md": "Depends on: no other folder.\n",
        "core/src/low/base.cpp": '#include "high/top.hpp"\n',
        "core/src/high/top.hpp": "#pragma once\n",
        "core/src/high/top.cpp": "\n",
    })
    (tmp_path / "plugins").mkdir()
    (tmp_path / "libs").mkdir()
    problems = check(tmp_path, {"low": ["high"], "high": ["low"]})
    assert problems == [
        "core/src/low: uses high/, which is not a folder declared before it",
        "core/src/high: uses low/ but includes none of its headers (core/CMakeLists.txt: wanfw_core_folder(high USES "
        "low))",
        "core/src/high/README.md: \"Depends on\" names no folder; the build says ['low']",
    ]


def test_layout_check_names_a_loose_file_a_missing_index_and_a_crowded_folder(tmp_path):
    write(tmp_path, {"core/src/loose.cpp": "", **{f"core/src/only/part_{i:02}.cpp": "" for i in range(17)}})
    (tmp_path / "plugins").mkdir()
    (tmp_path / "libs").mkdir()
    problems = check(tmp_path, {"only": []})
    assert problems == [
        "core/src/loose.cpp: outside core/src's folders (only)",
        "core/src/only: 17 source files; at most 16 (split the subsystem)",
        "core/src/only: no README.md (what it defines, what it depends on)",
    ]


def test_sdk_plugin_and_test_folders_hold_at_most_16_sources_and_a_readme():
    assert folder_problems(SOURCE) == []


def test_folder_check_names_a_crowded_plugin_folder_and_a_test_folder_without_readme(tmp_path):
    write(tmp_path, {**{f"plugins/kind/big/part_{i:02}.cpp": "" for i in range(17)},
                     "plugins/kind/big/README.md": "", "plugins/README.md": "",
                     "tests/unit/test_a.cpp": "", "tests/README.md": "", "tests/unit/runs/out.py": "",
                     "core/include/wanfw/a.hpp": "", "core/include/wanfw/README.md": ""})
    assert folder_problems(tmp_path) == [
        "plugins/kind/big: 17 source files; at most 16 (group them by concern)",
        "tests/unit: no README.md (what its files are for)",
    ]


def test_library_folders_include_only_the_folders_they_use_and_their_readmes_say_so():
    folders = library_folders(SOURCE)
    assert {"wan_dit/network", "wan_dit/adapters", "wan_dit/memory", "wan_vae/layers", "latent_shards"} <= set(folders)
    assert check_libraries(SOURCE) == []


def test_library_check_names_an_undeclared_include_a_crowded_folder_a_wrong_readme_and_an_unlinked_plugin(tmp_path):
    write(tmp_path, {
        "libs/net/CMakeLists.txt": "wanfw_lib_folder(low SOURCES a.cpp)\nwanfw_lib_folder(mid USES low SOURCES b.cpp)\n"
                                   "wanfw_lib_folder(top USES low SOURCES c.cpp)\n"
                                   "wanfw_add_shared_library(wanfw_net FOLDERS low mid top)\n",
        "libs/net/low/README.md": "Depends on: no other folder.\n",
        "libs/net/low/include/net/low.hpp": "#pragma once\n",
        "libs/net/mid/README.md": "Depends on: `low/`.\n",
        "libs/net/mid/include/net/mid.hpp": '#pragma once\n#include "net/low.hpp"\n',
        "libs/net/top/README.md": "Depends on: no other folder.\n",
        "libs/net/top/src/c.cpp": '#include "net/mid.hpp"\n',
        **{f"libs/net/low/src/part_{i:02}.cpp": '#include "net/mid.hpp"\n' if i == 0 else "" for i in range(16)},
        "libs/net/stray.cpp": "",
        "plugins/kind/thing/CMakeLists.txt": "wanfw_add_builtin_plugin(wanfw_thing SOURCES plugin.cpp)\n",
        "plugins/kind/thing/plugin.cpp": '#include "net/low.hpp"\n',
    })
    assert check_libraries(tmp_path) == [
        "libs/net/stray.cpp: outside libs/'s folders (net/low, net/mid, net/top)",
        "libs/net/low: 17 source files; at most 16 (split the library)",
        'libs/net/low/src/part_00.cpp: includes "net/mid.hpp", but net/low/ does not use mid/ '
        "(libs/net/CMakeLists.txt: wanfw_lib_folder(low))",
        'libs/net/top/src/c.cpp: includes "net/mid.hpp", but net/top/ does not use mid/ '
        "(libs/net/CMakeLists.txt: wanfw_lib_folder(top USES low))",
        "libs/net/top/README.md: \"Depends on\" names no folder; the build says ['low']",
        'plugins/kind/thing/plugin.cpp: includes "net/low.hpp" of libs/net, which plugins/kind/thing/CMakeLists.txt '
        "does not link (wanfw_net)",
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


def test_the_docs_and_comments_name_only_files_and_folders_that_exist():
    assert named_paths.check(SOURCE) == []


def test_the_named_paths_check_names_a_moved_file_a_renamed_folder_and_a_file_that_is_gone(tmp_path):
    write(tmp_path, {
        "core/src/units/block_swap.cpp": "// streams what units/unit_runtime.cpp runs (docs/low-memory.md)\n",
        "core/src/units/unit_runtime.cpp": "\n",
        "docs/guide.md": "See core/src/units/block_swap.cpp, core/src/swap/ and docs/missing.md.\n"
                         "The principle is DESIGN.md's; README.md holds the rest.\n",
        "README.md": "\n",
        "tests/helper.py": '"' * 3 + "Reads what gone.py wrote, like core/src/units/ says; not core/src/NAME." + '"' * 3,
    })
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert named_paths.check(tmp_path) == [
        "core/src/units/block_swap.cpp:1: names docs/low-memory.md, which does not exist",
        "docs/guide.md:1: names core/src/swap, which does not exist",
        "docs/guide.md:1: names docs/missing.md, which does not exist",
        "docs/guide.md:2: names DESIGN.md, which does not exist",  # a capital letter first is read too
        "tests/helper.py:1: names gone.py, which does not exist",
    ]


def test_no_test_module_imports_another_test_module():
    """Shared helpers live in tests/integration/harness/; a test module is never a library."""
    imports = []
    for path in sorted((SOURCE / "tests" / "integration").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            imports += [f"{path.relative_to(SOURCE)} imports {name}" for name in names if name.startswith("test_")]
    assert imports == []
