"""stress-slow: holds the request for ?seconds= (default 1, at most 300).

A slow function keeps requests in flight, which is what the autoscaler's
concurrency metric counts: call it with many clients at once to watch it
scale out. By the runtime contract a Python handler cannot answer 400, so
a bad ?seconds= is an exception, answered 500 with {"error": ...}.
"""

import math
import os
import time

MAX_SECONDS = 300


def handle(event):
    raw = event["query"].get("seconds", "1")
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"seconds must be a number, not {raw!r}") from None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
        raise ValueError(f"seconds must be between 0 and {MAX_SECONDS}, not {raw!r}")
    start = time.monotonic()
    time.sleep(seconds)
    return {"seconds": seconds, "slept": round(time.monotonic() - start, 3), "pid": os.getpid()}
