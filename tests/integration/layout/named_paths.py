#!/usr/bin/env python3
"""Checks that the docs and the code's comments name only files and folders that exist.

usage: named_paths.py ROOT

Read: every Markdown file outside build folders, and the comments of every C++, CMake, Python
and shell file the repository tracks. A name counts when it is a path of the repository
("core/src/units/unit_runtime.cpp", "docs/multi-gpu.md", "tests/plugins/"), a path inside one of
core/src's folders as the code writes them ("units/block_swap.cpp"), a path from the naming file's own
folder (a README's links to its subfolders), or a bare source file name
("block_swap.cpp"), which must name a file somewhere in the tree. Exit 1 and one line a name
that exists nowhere, with where it was written."""
import re
import subprocess
import sys
from pathlib import Path

TOP = ("core", "libs", "plugins", "tests", "apps", "tools", "bench", "examples", "scripts", "cmake", "docs", ".ci")
EXTENSIONS = r"(?:cpp|hpp|cu|cuh|h|py|md|cmake|sh|yaml|txt|json)"
PATH = re.compile(r"(?<![\w./-])((?:\.ci|[A-Za-z_][\w.-]*)(?:/[\w.-]+)*/?(?:[\w-]+\." + EXTENSIONS + r")?)(?![\w/*{<-])")
COMMENT = {".cpp": r"//(.*)", ".hpp": r"//(.*)", ".cu": r"//(.*)", ".cuh": r"//(.*)", ".h": r"//(.*)",
           ".py": r"(?:^|\s)#(.*)", ".cmake": r"(?:^|\s)#(.*)", ".sh": r"(?:^|\s)#(.*)", ".txt": r"(?:^|\s)#(.*)"}
# Paths of other projects: LibTorch's headers, the official Wan code's modules, a diffusers model
# folder's files, the Python packages the tests compare with.
EXTERNAL = ("wan/modules/", "vae2_", "vae/config.json", "torch/", "c10/", "ATen/", "tensorboard/", "diffusers/",
            "transformers/", "TorchConfig")
DOCSTRING = re.compile(r'"""(.*?)"""', re.S)


def tracked(root: Path) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root, capture_output=True,
                            text=True, check=True).stdout.split()
    return [root / name for name in listed if (root / name).is_file()]


def texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of what `path` says in prose: a Markdown file whole, a source file's comments."""
    text = path.read_text(errors="replace")
    if path.suffix == ".md":
        return list(enumerate(text.splitlines(), 1))
    pattern = COMMENT.get(path.suffix) or (COMMENT[".txt"] if path.name == "CMakeLists.txt" else None)
    if pattern is None:
        return []
    said = [(n, m.group(1)) for n, line in enumerate(text.splitlines(), 1) if (m := re.search(pattern, line))
            and not line.lstrip().startswith("#include")]
    if path.suffix == ".py":
        for m in DOCSTRING.finditer(text):
            first = text.count("\n", 0, m.start()) + 1
            said += [(first + i, line) for i, line in enumerate(m.group(1).splitlines())]
    return said


def candidates(text: str) -> list[str]:
    """The names in `text` that can only mean the repository's files or folders: a path from the
    top ("core/src/units/"), or a source file's name, bare or under a folder ("units/block_swap.cpp").
    Placeholders (core/src/NAME) and bare folders ("units/") are not names."""
    found = []
    for name in PATH.findall(text):
        plain = name.rstrip("/.")
        if plain.startswith(EXTERNAL) or plain.startswith(("my_", "_")) or \
                any(len(part) == 1 or part.isupper() for part in plain.split("/")):
            continue  # another project's, a placeholder (core/src/NAME, data/x/, my_strategy.cpp) or a suffix

        if plain.split("/")[0] in TOP and "/" in plain or re.search(r"\.(?:cpp|hpp|cu|cuh|py|md|cmake|sh)$", plain):
            found.append(plain)
    return found


def exists(root: Path, name: str, names: set[str], folders: set[str], relative_roots: list[Path],
           here: Path) -> bool:
    parts = name.split("/")
    if parts[0] in TOP:
        return (root / name).exists() or (here / name).exists()
    if len(parts) == 1:
        return name in names
    if any((base / name).exists() for base in (here, *relative_roots)):
        return True
    # Under a folder that is not ours: a folder that was renamed, unless the file is still found.
    return parts[0] not in folders and parts[-1] in names


def check(root: Path) -> list[str]:
    files = tracked(root)
    names = {p.name for p in files}
    folders = {part for p in files for part in p.relative_to(root).parts[:-1]}
    relative_roots = [root, root / "core" / "src", root / "core" / "include", root / "core" / "include" / "wanfw",
                      root / "tests" / "integration", *(root / "libs").glob("*/include"),
                      *(root / "libs").glob("*/src"), *(root / "libs").glob("*/*/include"),
                      *(root / "libs").glob("*/*/src"),
                      *(p for p in (root / "plugins").glob("*/*")), root / "tests"]
    problems = []
    for path in files:
        if "corpus" in path.parts:
            continue
        for line, text in texts(path):
            for name in candidates(text):
                if not exists(root, name, names, folders, relative_roots, path.parent):
                    problems.append(f"{path.relative_to(root)}:{line}: names {name}, which does not exist")
    return problems


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(Path(sys.argv[1]))
    print("\n".join(problems) if problems else "every file and folder the docs and comments name exists")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
