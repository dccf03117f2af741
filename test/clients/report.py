"""Shared by the client scripts: named checks and the JSON report the Go test reads.

A script reads its input (the gateway's URL and the keys) as JSON on stdin, records
checks with check()/expect(), and ends with run(main()) or finish(), which prints the report as the
last line of stdout and exits 1 if any check failed. A crash prints a traceback on
stderr, which the Go test shows.
"""
import asyncio
import json
import sys
import traceback

_checks = []
_data = {}


def read_input():
    return json.load(sys.stdin)


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return repr(v)


def check(name, ok, got=None, want=None):
    """Record a check; returns ok so a script can skip what depends on it."""
    _checks.append({"name": name, "ok": bool(ok), "got": _jsonable(got), "want": _jsonable(want)})
    return bool(ok)


def expect(name, got, want):
    """Record that got == want."""
    return check(name, got == want, got, want)


def data(name, value):
    """Hand a value to the Go side."""
    _data[name] = _jsonable(value)


def run(coro):
    """Run the script's coroutine and finish; a crash is a failed check, reported with
    the checks made before it."""
    try:
        asyncio.run(coro)
    except Exception as e:  # noqa: BLE001 - every crash goes into the report
        traceback.print_exc()
        check("the script ran to the end", False, "%s: %s" % (type(e).__name__, e), "no exception")
    finish()


def finish():
    print(json.dumps({"checks": _checks, "data": _data}, ensure_ascii=False))
    sys.stdout.flush()
    sys.exit(0 if all(c["ok"] for c in _checks) else 1)
