"""What the cluster tests share: a failure that names what was wrong, and a bounded wait."""

import time


class Failure(Exception):
    pass


def check(condition: bool, what: str) -> None:
    if not condition:
        raise Failure(what)


def wait_for(what: str, predicate, timeout: float, poll: float = 0.2):
    """predicate()'s first true value, polled every `poll` s; Failure after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what}")
