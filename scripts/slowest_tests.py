"""Prints the slowest test functions of the JUnit XML files in a folder (scripts/test.sh).

    python scripts/slowest_tests.py FOLDER [COUNT]

Each file is one CTest entry's pytest run (<build>/test-results/<entry>.xml); a test's name is
its entry's, a module's test function, and its parameters. A test that ran under several vector
units is listed once a unit (its entry names the unit)."""

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def timed_tests(folder: Path):
    for file in sorted(folder.glob("*.xml")):
        entry = file.stem
        try:
            root = ElementTree.parse(file).getroot()
        except ElementTree.ParseError:  # an entry killed while writing it
            continue
        unit = entry.partition("@")[2]
        for case in root.iter("testcase"):
            module = case.get("classname", "").rpartition(".")[2].removeprefix("test_")
            name = f"integration.{module}.{case.get('name')}" + (f"@{unit}" if unit else "")
            yield float(case.get("time", 0)), name


def main():
    folder = Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    for seconds, name in sorted(timed_tests(folder), reverse=True)[:count]:
        print(f"  {seconds:8.1f}  {name}")


if __name__ == "__main__":
    main()
