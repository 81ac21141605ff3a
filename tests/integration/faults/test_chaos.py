"""Seven trials of the chaos driver (chaos.py; docs/reliability.md has the 50-trial figures): a rank
killed or stopped at a random moment, or killed at a named point of writing a checkpoint; the run
resumed until it ends, and its end compared with the uninterrupted run's."""
import pytest

import chaos

SEED = 20261127  # chaos.py prints the seed of every run: a trial is repeated with it


@pytest.mark.own_entry
def test_seven_chaos_trials_lose_no_run_hang_nowhere_and_end_as_their_uninterrupted_runs(tmp_path, capsys):
    code = chaos.main(["--trials", "7", "--seed", str(SEED), "--out", str(tmp_path),
                       "--layouts", "ddp_2,fsdp_2,fsdp_sp_2,fsdp_hybrid,grad_accum,lora,dmd"])
    printed = capsys.readouterr().out
    trials = [line for line in printed.splitlines() if line.startswith("trial ")]
    assert code == 0 and len(trials) == 7, printed
    assert all(line.split()[3] == "ok" for line in trials), printed
    assert not [line for line in trials if "(the run ended first)" in line], printed  # every fault landed
