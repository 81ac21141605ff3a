"""What the suite reports of itself: a test that cannot run on this machine is counted as skipped,
never as passed, and scripts/test.sh's summary lists it with the reason (scripts/not_run.py)."""
import re
import subprocess
import sys
import textwrap

import torch

from harness.runs import BUILD, SOURCE


def test_no_unit_case_returns_early_as_a_pass_when_it_cannot_run():
    # A case that needs a device belongs to the doctest suite "cuda" (its own CTest entry), instead
    # of saying "skipped" and returning, which CTest would count as passed.
    early = [f"{path.relative_to(SOURCE)}:{n}" for path in sorted((SOURCE / "tests" / "unit").rglob("*.cpp"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r'MESSAGE\("skipped', line)]
    assert early == []


def test_the_cuda_unit_cases_run_on_a_gpu_and_report_skipped_without_one():
    result = subprocess.run([BUILD / "bin" / "wanfw_unit_tests", "--test-suite=cuda"], capture_output=True, text=True,
                            timeout=600)
    if torch.cuda.is_available():
        assert result.returncode == 0, result.stdout
        assert re.search(r"test cases: +[1-9]\d* \| +[1-9]\d* passed", result.stdout)
    else:
        assert result.returncode == 77  # the entry's SKIP_RETURN_CODE
        assert "skipped: this machine has no CUDA device" in result.stdout
    # Registered as an entry CTest reports skipped on that exit code. Read from the build's CTest
    # file, not by running ctest there: any ctest run in the build folder rewrites the record of the
    # suite's own run (Testing/Temporary/LastTest.log), which scripts/not_run.py reads.
    registered = (BUILD / "tests" / "CTestTestfile.cmake").read_text()
    assert re.search(r'set_tests_properties\(\[=\[unit\.cuda\]=\] PROPERTIES .*SKIP_RETURN_CODE "77"', registered)


def test_the_summary_lists_a_skipped_ctest_entry_and_a_skipped_pytest_test_with_their_reasons(tmp_path):
    # A CTest project of two entries, one of which skips as unit.cuda does, and a pytest run that
    # skips a test, written where scripts/test.sh's build folder keeps them.
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.20)
        project(reports NONE)
        enable_testing()
        add_test(NAME runs COMMAND sh -c "echo ran")
        add_test(NAME needs_a_gpu COMMAND sh -c "echo 'skipped: this machine has no CUDA device'; exit 77")
        set_tests_properties(needs_a_gpu PROPERTIES SKIP_RETURN_CODE 77)
        """))
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", project, "-B", build], check=True, capture_output=True)
    ctest = subprocess.run(["ctest"], cwd=build, capture_output=True, text=True)
    (build / "ctest-last.log").write_text(ctest.stdout)  # as scripts/test.sh keeps it
    (tmp_path / "test_sample.py").write_text("import pytest\n\n\ndef test_needs_a_package():\n"
                                             "    pytest.skip('no module named bitsandbytes')\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={build / 'test-results' / 'integration.sample.xml'}", tmp_path / "test_sample.py"],
                   cwd=tmp_path, capture_output=True, check=True)
    summary = subprocess.run([sys.executable, SOURCE / "scripts" / "not_run.py", build], capture_output=True,
                             text=True, check=True).stdout
    assert summary.splitlines() == [
        "Not run (CTest counts none of these as passed or failed):",
        "  needs_a_gpu: skipped: this machine has no CUDA device",
        "  integration.sample::test_needs_a_package: no module named bitsandbytes",
    ]
