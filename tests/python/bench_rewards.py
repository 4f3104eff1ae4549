# A reward costing ~2 ms of CPU per call, like a symbolic-math or math-verify check, for
# bench/python_reward.cpp.
import time


def costly(data_source, solution_str, ground_truth, extra_info=None):
    end = time.perf_counter() + 0.002
    total = 0
    while time.perf_counter() < end:
        total += sum(ord(c) for c in solution_str)
    return 1.0 if solution_str.rstrip().endswith(str(ground_truth)) else 0.0
