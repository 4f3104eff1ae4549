# Reward functions for tests/rewards/test_python_rewards.cpp: one behaviour each.
import math
import os
import time

import numpy


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's signature: 1.0 when the response is the ground truth."""
    return 1.0 if solution_str.strip() == ground_truth else 0.0


def with_parts(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": float(len(solution_str)), "acc": solution_str == ground_truth, "pid": os.getpid(),
            "pred": solution_str, "numpy_part": numpy.float32(0.5)}


def echo_inputs(data_source, solution_str, ground_truth, extra_info=None):
    # Encodes what arrived as parts: the test checks each argument's Python value.
    return {"score": numpy.int64(3),
            "source_is_str": isinstance(data_source, str) and data_source == "gsm8k",
            "truth_is_none": ground_truth is None,
            "extra_is_dict": isinstance(extra_info, dict) and extra_info.get("index") == 7}


def echo_conversation(data_source, solution_str, ground_truth, extra_info=None):
    # Multi-turn: the conversation arrives in extra_info beside the row's own keys.
    messages = extra_info["messages"]
    return {"score": len(messages),
            "row_key_kept": extra_info.get("index") == 7,
            "stop_is_max_turns": extra_info["stop_reason"] == "max_turns",
            "tool_said_42": messages[1]["role"] == "tool" and messages[1]["content"] == "42",
            "answer_is_last": solution_str == messages[-1]["content"]}


def fails_on_boom(data_source, solution_str, ground_truth, extra_info=None):
    if "boom" in solution_str:
        raise ValueError("cannot score " + solution_str)
    return 1.0


def returns_text(data_source, solution_str, ground_truth, extra_info=None):
    return "1.0"


def returns_nan(data_source, solution_str, ground_truth, extra_info=None):
    return math.nan


def sleeps_on_slow(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "slow":
        time.sleep(60)
    return 2.0


def dies_on_crash(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "crash":
        os._exit(3)
    return 4.0


def prints_a_lot(data_source, solution_str, ground_truth, extra_info=None):
    print("this goes to the worker's log, not the protocol")
    return 5.0


def batched_lengths(data_sources, solution_strs, ground_truths, extra_infos):
    return [len(s) for s in solution_strs]


def batched_wrong_length(data_sources, solution_strs, ground_truths, extra_infos):
    return [1.0]


not_a_function = 3


# Signatures verl accepts, since it calls by keyword (issue 26): the order of the
# parameters is the author's, and a positional call would mix them up.
def solution_first(solution_str, ground_truth, data_source=None, extra_info=None, **kwargs):
    return {"score": 1.0 if solution_str.strip() == ground_truth else 0.0,
            "source_ok": data_source == "openai/gsm8k",
            "no_kwargs": not kwargs}


def keyword_only(*, data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 1.0 if solution_str.strip() == ground_truth else 0.0, "source_ok": data_source == "openai/gsm8k"}


def scaled(data_source, solution_str, ground_truth, extra_info=None, scale=1.0, bonus=None):
    """reward_kwargs: scale and bonus come from the config."""
    correct = 1.0 if solution_str.strip() == ground_truth else 0.0
    return {"score": scale * correct, "bonus_ok": bonus == {"list": [1, "two"], "flag": True}}


def batched_scaled(data_sources, solution_strs, ground_truths, extra_infos, scale=1.0):
    return [scale * len(s) for s in solution_strs]


def wrong_names(response, answer):
    """Cannot take verl's keywords: refused at start, naming what is missing."""
    return 0.0
