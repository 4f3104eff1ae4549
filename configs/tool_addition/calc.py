"""The calculator the tool_addition demo's policy calls (configs/tool_addition.yaml)."""


def add(a: int, b: int):
    """Adds two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b
