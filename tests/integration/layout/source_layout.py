#!/usr/bin/env python3
"""Checks the layout of core/src against its folder graph, libs/ against its libraries' folders
(library_layout.py), and what plugins and libraries include.

usage: source_layout.py [--graph] ROOT   (the graph is read from ROOT/core/CMakeLists.txt)

--graph checks the folder graphs alone (core/src's and libs/'): what the build runs before it
compiles the libraries, whose unity batches see every folder's headers.

The graph: core/CMakeLists.txt declares each folder with `wanfw_core_folder(NAME USES A B ...
SOURCES ...)`, lowest first; the build lets a folder include only its own headers and those of
the folders it uses (cmake/WanfwCoreFolder.cmake). Fails (exit 1, one line a problem) when
- a file in core/src lies outside the declared folders, or a declared folder is missing;
- a folder holds more than 16 source files, or has no README.md;
- a core/src file includes a core/src header without its folder ("trainer.hpp" for
  "train/trainer.hpp"), or reaches a folder it does not use, directly or through a header;
- a folder uses a folder it never reaches, or one declared after it;
- a folder's README.md "Depends on" line names other folders than it uses;
- a file under plugins/ or libs/ includes a core/src header (they build on the SDK alone), or
  logs through spdlog instead of wanfw/log.hpp (whose lines follow the host's level and rank rule);
- a folder of the SDK (core/include), plugins/ or tests/ that holds source files holds more than 16,
  or has no README.md (folder_problems).
"""
import re
import sys
from pathlib import Path

from library_layout import check_libraries, declaration_problems

MAX_SOURCES = 16
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
FOLDER = re.compile(r"wanfw_core_folder\((\w+)([^)]*)\)")
SOURCE = {".cpp", ".hpp"}


def folder_graph(cmake_text: str) -> dict[str, list[str]]:
    """Each folder's uses, in declaration order, from core/CMakeLists.txt's wanfw_core_folder calls."""
    graph = {}
    for name, rest in FOLDER.findall(cmake_text):
        args = rest.split()
        graph[name] = args[args.index("USES") + 1:args.index("SOURCES")] if "USES" in args else []
    return graph


def includes(path: Path) -> list[str]:
    return INCLUDE.findall(path.read_text(errors="replace"))


def reached(src: Path, header: str, graph: dict, seen: set) -> set:
    """The core/src headers `header` includes, directly or through others (folder-qualified)."""
    path = src / header
    if header.split("/")[0] not in graph or not path.is_file():
        return seen
    for target in includes(path):
        if target not in seen and target.split("/")[0] in graph:
            seen.add(target)
            reached(src, target, graph, seen)
    return seen


def check(root: Path, graph: dict[str, list[str]]) -> list[str]:
    src = root / "core" / "src"
    order = list(graph)
    problems = []
    headers = {}  # file name -> folders holding it
    for path in sorted(src.rglob("*")):
        if path.is_file() and path.suffix in SOURCE:
            parts = path.relative_to(src).parts
            folder = parts[0] if len(parts) > 1 else ""
            if folder not in graph:
                problems.append(f"{path.relative_to(root)}: outside core/src's folders ({', '.join(order)})")
            headers.setdefault(path.name, set()).add(folder)
    for folder, uses in graph.items():
        where = src / folder
        if not where.is_dir():
            problems.append(f"core/src/{folder}: declared in core/CMakeLists.txt but missing")
            continue
        sources = sorted(p for p in where.rglob("*") if p.suffix in SOURCE)
        if len(sources) > MAX_SOURCES:
            problems.append(f"core/src/{folder}: {len(sources)} source files; at most {MAX_SOURCES} "
                            "(split the subsystem)")
        declared = f"core/CMakeLists.txt: wanfw_core_folder({folder}{' USES ' + ' '.join(uses) if uses else ''})"
        needed = set()
        for path in sources:
            for target in includes(path):
                parts = target.split("/")
                where_from = f"{path.relative_to(root)}: includes \"{target}\""
                if len(parts) == 1:
                    if target in headers:
                        problems.append(f"{where_from} without its folder "
                                        f"(\"{sorted(headers[target])[0]}/{target}\")")
                    continue
                if parts[0] not in graph:
                    continue
                if parts[0] != folder:
                    needed.add(parts[0])
                    if parts[0] not in uses:
                        problems.append(f"{where_from}, but {folder}/ does not use {parts[0]}/ ({declared})")
                for deeper in sorted(reached(src, target, graph, set())):
                    other = deeper.split("/")[0]
                    if other == folder:
                        continue
                    needed.add(other)
                    if other not in uses and other != parts[0]:
                        problems.append(f"{where_from}, which reaches \"{deeper}\", but {folder}/ does not use "
                                        f"{other}/ ({declared})")
        problems += declaration_problems(f"core/src/{folder}", folder, uses, needed, order, declared, where / "README.md")
    for outside in ("plugins", "libs"):
        for path in sorted((root / outside).rglob("*")):
            if not (path.is_file() and path.suffix in SOURCE):
                continue
            text = path.read_text(errors="replace")
            for target in INCLUDE.findall(text):
                if target.split("/")[0] in graph and (src / target).is_file():
                    problems.append(f"{path.relative_to(root)}: includes core/src's \"{target}\"; "
                                    "plugins and their libraries build on the SDK (core/include) alone")
            if "spdlog" in text:
                problems.append(f"{path.relative_to(root)}: uses spdlog; plugins and their libraries log through "
                                "wanfw/log.hpp (the host's level and rank rule)")
    return problems


SCANNED = {".cpp", ".hpp", ".cu", ".cuh", ".py"}
SKIPPED = {"__pycache__", "corpus", "runs"}  # caches, fuzz inputs, a test run's output


def folder_problems(root: Path, tops=("core/include", "plugins", "tests")) -> list[str]:
    """Each folder under `tops` that holds source files: at most 16 of them, and a README.md."""
    problems = []
    for top in tops:
        base = root / top
        for folder in sorted([base, *(p for p in base.rglob("*") if p.is_dir())]):
            if SKIPPED & set(folder.relative_to(root).parts):
                continue
            sources = [p for p in folder.iterdir() if p.is_file() and p.suffix in SCANNED]
            where = folder.relative_to(root).as_posix()
            if len(sources) > MAX_SOURCES:
                problems.append(f"{where}: {len(sources)} source files; at most {MAX_SOURCES} (group them by concern)")
            if sources and not (folder / "README.md").is_file():
                problems.append(f"{where}: no README.md (what its files are for)")
    return problems


def main() -> int:
    args = sys.argv[1:]
    graph_only = args[:1] == ["--graph"]
    args = args[1:] if graph_only else args
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(args[0])
    graph = folder_graph((root / "core" / "CMakeLists.txt").read_text())
    problems = check(root, graph) + check_libraries(root) + ([] if graph_only else folder_problems(root))
    for problem in problems:
        print(problem)
    if not problems:
        print(f"core/src: {len(graph)} folders, libs/: its libraries' folders, each including only the folders it uses")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
