#!/usr/bin/env python3
"""Checks the layout of core/src: its subsystem folders depend one way.

usage: source_layout.py ROOT FOLDER...   (FOLDER: core/src's folders, lowest first)

Fails (exit 1, one line a problem) when
- a file in core/src lies outside the named folders, or a named folder is missing;
- a folder holds more than 16 source files, or has no README.md;
- a core/src file includes a header of a folder named after its own (an upward include), or
  includes a core/src header without its folder ("trainer.hpp" instead of "train/trainer.hpp");
- a file under plugins/ or libs/ includes a core/src header (they build on the SDK alone).
"""
import re
import sys
from pathlib import Path

MAX_SOURCES = 16
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = {".cpp", ".hpp"}


def check(root: Path, order: list[str]) -> list[str]:
    src = root / "core" / "src"
    rank = {folder: i for i, folder in enumerate(order)}
    problems = []
    headers = {}  # file name -> folders holding it
    for path in sorted(src.rglob("*")):
        if path.is_file() and path.suffix in SOURCE:
            folder = path.relative_to(src).parts[0] if len(path.relative_to(src).parts) > 1 else ""
            if folder not in rank:
                problems.append(f"{path.relative_to(root)}: outside core/src's folders ({', '.join(order)})")
            headers.setdefault(path.name, set()).add(folder)
    for folder in order:
        where = src / folder
        if not where.is_dir():
            problems.append(f"core/src/{folder}: named in WANFW_CORE_FOLDERS but missing")
            continue
        sources = [p for p in where.rglob("*") if p.suffix in SOURCE]
        if len(sources) > MAX_SOURCES:
            problems.append(f"core/src/{folder}: {len(sources)} source files; at most {MAX_SOURCES} "
                            "(split the subsystem)")
        if not (where / "README.md").is_file():
            problems.append(f"core/src/{folder}: no README.md (what it defines, what it depends on)")
        for path in sorted(sources):
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                parts = target.split("/")
                where_from = f"{path.relative_to(root)}: includes \"{target}\""
                if len(parts) == 1:
                    if target in headers:
                        problems.append(f"{where_from} without its folder "
                                        f"(\"{sorted(headers[target])[0]}/{target}\")")
                    continue
                if parts[0] in rank and rank[parts[0]] > rank[folder]:
                    problems.append(f"{where_from}, but {parts[0]}/ comes after {folder}/ "
                                    f"(order: {' < '.join(order)})")
    for outside in ("plugins", "libs"):
        for path in sorted((root / outside).rglob("*")):
            if path.is_file() and path.suffix in SOURCE:
                for target in INCLUDE.findall(path.read_text(errors="replace")):
                    first = target.split("/")[0]
                    if first in rank and (src / target).is_file():
                        problems.append(f"{path.relative_to(root)}: includes core/src's \"{target}\"; "
                                        "plugins and their libraries build on the SDK (core/include) alone")
    return problems


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(Path(sys.argv[1]), sys.argv[2:])
    for problem in problems:
        print(problem)
    if not problems:
        print(f"core/src: {len(sys.argv) - 2} folders, every include points down the order")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
