# Fails when imported: tests/rewards/test_python_rewards.cpp expects the traceback.
import this_module_does_not_exist_anywhere  # noqa: F401


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 0.0
