"""schemathesis hooks of scripts/fuzz.

A claim with `wait_seconds` holds its request open that long when no work is available, which is
almost always so for generated agent ids: schema-valid waits (up to 30 s) would spend the run's
time budget in sleeps. Valid waits are shortened to 1 s before sending; values outside the
schema are left alone, so they are still sent and must still be refused.
"""

import schemathesis


@schemathesis.hook
def before_call(context, case, **kwargs):
    if case.operation.path != "/v1/claims" or not isinstance(case.body, dict):
        return
    wait = case.body.get("wait_seconds")
    # JSON Schema counts 10.0 as an integer, and so does kairos.
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait == int(wait) and 1 < wait <= 30:
        case.body["wait_seconds"] = 1
