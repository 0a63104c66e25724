import time

from npuport.bench import summarize, time_calls


def test_summary_percentiles():
    s = summarize([float(x) for x in range(1, 101)])
    assert s["runs"] == 100 and s["p50_ms"] == 50.5 and s["max_ms"] == 100.0 and s["min_ms"] == 1.0
    assert abs(s["p99_ms"] - 99.01) < 1e-9 and abs(s["jitter"] - 99.01 / 50.5) < 1e-12


def test_single_sample_and_timer():
    s = summarize([3.0])
    assert s["stdev_ms"] == 0.0 and s["jitter"] == 1.0
    calls = []
    # time.sleep sleeps at least as long as asked: every sample, in milliseconds, is at least the 5 ms slept (a timer
    # in seconds, or one that timed the warm-up calls away, would fail). A lower bound only: no speed is asserted.
    out = time_calls(lambda: (calls.append(1), time.sleep(0.005)), runs=4, warmup=2)
    assert len(out) == 4 and len(calls) == 6 and all(t >= 5.0 for t in out)
