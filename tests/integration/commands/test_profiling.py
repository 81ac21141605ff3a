"""trainer.profile_steps: the torch profiler records the chosen steps of a run into a trace that
the usual viewers open (Chrome trace JSON), and the log names where the time went."""

import json
import re

from harness.runs import base_config, wanfw, write_config


def test_the_profiled_steps_are_written_as_a_chrome_trace_and_their_costliest_operators_logged(tmp_path, out):
    model = {"name": "wan22_flow_matching", "preset": "tiny", "text_len": 4}
    config = write_config(tmp_path / "exp.yaml", base_config(
        out, model=model, data={"num_samples": 16, "batch_size": 2, "workers": 0, "buckets": ["2x4x4"]},
        trainer={"max_steps": 6, "log_every": 3, "progress": "lines", "profile_steps": 2, "profile_from": 3}))
    result = wanfw("run", config, check=0)
    trace = out / "exp" / "version_0" / "profile" / "trace-rank0.json"
    assert f"profile of steps 3-4: {trace}" in result.stdout
    assert "profile: CPU operators (inclusive) a step, over 2 step(s)" in result.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    operators = [e for e in events if e.get("cat") == "cpu_op"]
    # The table: the trace's operators, costliest first (times per step, inclusive of nested ones).
    rows = [(float(m[1]), m[2]) for m in re.finditer(r"\] +([\d.]+) ms +\d+ calls  (.+)", result.stdout)]
    assert len(rows) == 12 and [t for t, _ in rows] == sorted((t for t, _ in rows), reverse=True)
    totals = {}
    for e in operators:
        totals[e["name"]] = totals.get(e["name"], 0) + e["dur"]
    costliest = sorted(totals, key=totals.get, reverse=True)
    # The table shortens a long name to its first characters and "...".
    def names(shown, full):
        return full == shown or (shown.endswith("...") and full.startswith(shown[:-3]))
    assert any(names(rows[0][1], full) for full in costliest[:3]), (rows[0], costliest[:3])
    assert all(any(names(shown, full) for full in totals) for _, shown in rows)
    assert any(e["name"] == "aten::scaled_dot_product_attention" for e in operators)
    # Only the window: the profiled operators span two steps, not six.
    assert sum(e["name"] == "aten::scaled_dot_product_attention" for e in operators) == 2 * 2 * 2  # steps x blocks x (self, cross)


def test_a_window_reaching_past_the_last_step_is_written_with_the_steps_it_holds(tmp_path, out):
    config = write_config(tmp_path / "exp.yaml", base_config(
        out, trainer={"max_steps": 4, "log_every": 2, "progress": "lines", "profile_steps": 5, "profile_from": 3}))
    result = wanfw("run", config, check=0)
    assert "profile of steps 3-4:" in result.stdout
    assert (out / "exp" / "version_0" / "profile" / "trace-rank0.json").exists()
