"""Checks the layout of libs/ against the folders its libraries declare, and which libraries' headers
the plugins include.

A library of several concerns declares its folders in libs/<library>/CMakeLists.txt with
`wanfw_lib_folder(NAME USES A B ... SOURCES ...)`, lowest first (cmake/WanfwSharedLibrary.cmake);
each folder keeps its public headers in NAME/include and its units in NAME/src, and the build lets a
unit include only its own folder's headers and those of the folders it uses. A library that declares
no folders is one folder itself. Problems (one line each):
- a source file of libs/ outside every folder, or a declared folder that is missing;
- a folder of more than 16 source files, or without a README.md;
- a unit that includes a header of a folder its folder does not use, directly or through a header;
- a folder that uses a folder it never reaches, or one declared after it;
- a README.md whose "Depends on" line names other folders than the build declares;
- a file of plugins/<kind>/<name>/ that includes a library's header while its CMakeLists.txt does
  not link that library.
"""
import re
from pathlib import Path

MAX_SOURCES = 16
SOURCE = {".cpp", ".hpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
FOLDER = re.compile(r"wanfw_lib_folder\((\w+)([^)]*)\)")
TARGET = re.compile(r"(?:wanfw_add_shared_library|add_library)\((\w+)")
LINKED = re.compile(r"target_link_libraries\(([^)]*)\)")
DEPENDS = re.compile(r"^Depends on: (.*)$", re.M)


def library_folders(root: Path) -> dict[str, list[str]]:
    """Each folder of libs/ ("wan_dit/network", or "latent_shards" for a library of one) and its
    uses, in declaration order."""
    folders = {}
    for cmake in sorted((root / "libs").glob("*/CMakeLists.txt")):
        library = cmake.parent.name
        declared = FOLDER.findall(cmake.read_text())
        if not declared:
            folders[library] = []
        for name, rest in declared:
            args = rest.split()
            uses = args[args.index("USES") + 1:args.index("SOURCES")] if "USES" in args else []
            folders[f"{library}/{name}"] = [f"{library}/{used}" for used in uses]
    return folders


def public_headers(root: Path, folders: dict) -> dict[str, str]:
    """Include path ("wan/lora.hpp") -> the folder whose include/ holds it."""
    owners = {}
    for folder in folders:
        include = root / "libs" / folder / "include"
        for path in include.rglob("*") if include.is_dir() else []:
            if path.suffix in SOURCE:
                owners[path.relative_to(include).as_posix()] = folder
    return owners


def reached(root: Path, header: str, owners: dict, seen: set) -> set:
    """The folders whose headers `header` includes, directly or through others."""
    path = root / "libs" / owners[header] / "include" / header
    for target in INCLUDE.findall(path.read_text(errors="replace")):
        if target in owners and target not in seen:
            seen.add(target)
            reached(root, target, owners, seen)
    return seen


def readme_folders(readme: Path) -> list[str] | None:
    found = DEPENDS.search(readme.read_text())
    return None if found is None else sorted(re.findall(r"\b(\w+)/(?=[`,.;:\s]|$)", found.group(1)))


def declaration_problems(label: str, folder: str, uses: list[str], needed: set, order: list[str], declared: str,
                         readme: Path, short=lambda used: used) -> list[str]:
    """A folder's declared uses against the graph's order and what its units include, and its
    README.md's "Depends on" line against them (core/src's folders and libs/' alike)."""
    problems = []
    for used in uses:
        if used not in order or order.index(used) > order.index(folder):
            problems.append(f"{label}: uses {short(used)}/, which is not a folder declared before it")
        elif used not in needed:
            problems.append(f"{label}: uses {short(used)}/ but includes none of its headers ({declared})")
    if not readme.is_file():
        return problems + [f"{label}: no README.md (what it defines, what it depends on)"]
    named, build = readme_folders(readme), sorted(short(used) for used in uses)
    if named != build:
        said = "no \"Depends on:\" line" if named is None else f"\"Depends on\" names {named or 'no folder'}"
        problems.append(f"{label}/README.md: {said}; the build says {build or 'no folder'}")
    return problems


def check_folder(root: Path, folder: str, uses: list[str], order: list[str], owners: dict) -> list[str]:
    where = root / "libs" / folder
    if not where.is_dir():
        return [f"libs/{folder}: declared in libs/{folder.split('/')[0]}/CMakeLists.txt but missing"]
    problems = []
    sources = sorted(p for p in where.rglob("*") if p.suffix in SOURCE)
    if len(sources) > MAX_SOURCES:
        problems.append(f"libs/{folder}: {len(sources)} source files; at most {MAX_SOURCES} (split the library)")
    library, _, name = folder.partition("/")
    declared = f"libs/{library}/CMakeLists.txt: wanfw_lib_folder({name}" + \
        (" USES " + " ".join(u.split("/")[-1] for u in uses) if uses else "") + ")"
    needed = set()
    for path in sources:
        for target in INCLUDE.findall(path.read_text(errors="replace")):
            if target not in owners:
                continue
            for header in [target, *sorted(reached(root, target, owners, set()))]:
                other = owners[header]
                if other == folder:
                    continue
                needed.add(other)
                if other not in uses:
                    how = "" if header == target else f", which reaches \"{header}\""
                    problems.append(f"{path.relative_to(root)}: includes \"{target}\"{how}, but {folder}/ does not "
                                    f"use {other.split('/')[-1]}/ ({declared})")
    return problems + declaration_problems(f"libs/{folder}", folder, uses, needed, order, declared, where / "README.md",
                                           lambda used: used.split("/")[-1])


def check_plugins(root: Path, folders: dict, owners: dict) -> list[str]:
    """A plugin includes the headers of the libraries it links, and no others."""
    target_of = {}  # library folder name -> its target
    for cmake in (root / "libs").glob("*/CMakeLists.txt"):
        found = TARGET.search(cmake.read_text())
        if found:
            target_of[cmake.parent.name] = found.group(1)
    problems = []
    for cmake in sorted((root / "plugins").glob("*/*/CMakeLists.txt")):
        linked = set(" ".join(LINKED.findall(cmake.read_text())).split())
        for path in sorted(cmake.parent.rglob("*")):
            if path.suffix not in SOURCE:
                continue
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                library = owners[target].split("/")[0] if target in owners else None
                if library and target_of.get(library) not in linked:
                    problems.append(f"{path.relative_to(root)}: includes \"{target}\" of libs/{library}, which "
                                    f"{cmake.relative_to(root)} does not link ({target_of.get(library)})")
    return problems


def check_libraries(root: Path) -> list[str]:
    folders = library_folders(root)
    owners = public_headers(root, folders)
    order = list(folders)
    problems = []
    for path in sorted((root / "libs").rglob("*")):
        if path.suffix in SOURCE and not any(path.is_relative_to(root / "libs" / f) for f in folders):
            problems.append(f"{path.relative_to(root)}: outside libs/'s folders ({', '.join(order)})")
    for folder, uses in folders.items():
        problems += check_folder(root, folder, uses, order, owners)
    return problems + check_plugins(root, folders, owners)
