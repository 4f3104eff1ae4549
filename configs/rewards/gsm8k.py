"""GSM8K reward with verl's compute_score signature, for configs/gsm8k.yaml.

A response is correct when the number after its last "####" equals the reference
answer's (thousands commas and a trailing period ignored). Responses without "####"
fall back to their last number, for half credit on the format part only.

ground_truth is either the bare number (verl's preprocessed GSM8K) or GSM8K's whole
solution text ending in "#### <number>" (the raw openai/grade-school-math files).
"""
import re

_NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")


def _clean(number):
    return number.replace(",", "").rstrip(".")


def _reference(ground_truth):
    text = str(ground_truth)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return _clean(text.strip())


def _same(a, b):
    try:
        return abs(float(a) - float(b)) < 1e-6
    except ValueError:
        return a == b


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    reference = _reference(ground_truth)
    if "####" in solution_str:
        numbers = _NUMBER.findall(solution_str.rsplit("####", 1)[1])
        answer = _clean(numbers[0]) if numbers else None
        formatted = 1.0
    else:
        numbers = _NUMBER.findall(solution_str)
        answer = _clean(numbers[-1]) if numbers else None
        formatted = 0.0
    correct = answer is not None and _same(answer, reference)
    return {"score": 1.0 if correct and formatted else 0.0, "format": formatted, "acc": float(correct)}
