# Rewards that misbehave the ways careless or hostile reward code does (issue 29):
# tests/rewards/test_reward_containment.cpp runs each under the Python reward pool.
import os
import subprocess
import sys
import time

print("printed while importing: this belongs in the reward's log, not on the console")


def allocates(data_source, solution_str, ground_truth, extra_info=None):
    block = bytearray(int(solution_str) << 20)  # MiB, touched: bytearray zero-fills
    return float(len(block) > 0)


def forks_and_returns(data_source, solution_str, ground_truth, extra_info=None, pid_file=None):
    # A grandchild that would outlive everything if it were not killed with the group.
    child = subprocess.Popen(["sleep", "300"])
    with open(pid_file, "a") as out:
        out.write(f"{child.pid}\n")
    return 1.0


def forks_then_dies(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "die":
        if os.fork() == 0:  # the child keeps the worker's pipes open
            time.sleep(300)
            os._exit(0)
        os._exit(3)
    return 1.0


def reads_stdin(data_source, solution_str, ground_truth, extra_info=None):
    swallowed = sys.stdin.read()
    return float(len(swallowed))


def spawns_many(data_source, solution_str, ground_truth, extra_info=None):
    children = [subprocess.Popen(["sleep", "300"]) for _ in range(int(solution_str))]
    time.sleep(5)
    return float(len(children))


def boom_then_slow(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "boom":
        raise ValueError("boom")
    time.sleep(0.5)
    return 2.0


def sleeps(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(60)
    return 1.0
