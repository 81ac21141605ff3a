"""Prints what the suite did not run, and why (scripts/test.sh): the CTest entries that reported
themselves skipped (a unit test entry that needs a GPU on a machine without one) with the line
they gave, and the pytest tests that skipped (a package missing, say) with their reason.

    python scripts/not_run.py BUILD_FOLDER

Reads <build>/ctest-last.log (CTest's console output, which scripts/test.sh keeps: the entries it
marks "(Skipped)"), <build>/Testing/Temporary/LastTest.log (every entry's output, where a skipped
one said why) and <build>/test-results/*.xml (each integration entry's pytest run as JUnit XML).
Prints nothing when everything ran."""

import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def skipped_entries(build: Path):
    """(entry, the first line of its output) of each CTest entry that ended skipped."""
    console = build / "ctest-last.log"
    if not console.is_file():
        return
    # "The following tests did not run:" then "\t  2 - needs_a_gpu (Skipped)"
    names = re.findall(r"^\s+\d+ - (\S+) \(Skipped\)$", console.read_text(errors="replace"), re.M)
    log = build / "Testing" / "Temporary" / "LastTest.log"
    outputs = {}
    if log.is_file():
        for record in re.split(r"\n-{20,}\n\n", log.read_text(errors="replace")):
            name = re.search(r'^"(.+?)" start time', record, re.M)
            if name:
                output = record.partition("Output:\n")[2].partition("<end of output>")[0]
                outputs[name.group(1)] = [line for line in output.splitlines() if line.strip() and
                                          not line.startswith("-----")]
    for name in names:
        yield name, (outputs.get(name) or ["no reason given"])[0]


def skipped_tests(build: Path):
    """(entry::test, reason) of each pytest test that skipped."""
    for file in sorted((build / "test-results").glob("*.xml")):
        try:
            root = ElementTree.parse(file).getroot()
        except ElementTree.ParseError:  # an entry killed while writing it
            continue
        for case in root.iter("testcase"):
            skipped = case.find("skipped")
            if skipped is not None:
                yield f"{file.stem}::{case.get('name')}", skipped.get("message", "no reason given")


def main():
    build = Path(sys.argv[1])
    lines = [f"  {name}: {reason}" for name, reason in [*skipped_entries(build), *skipped_tests(build)]]
    if lines:
        print("Not run (CTest counts none of these as passed or failed):")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
