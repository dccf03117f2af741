"""fastmcp's client (PyPI fastmcp, a second MCP client beside the official mcp package)
against the gateway's /mcp.

Input (stdin, JSON): url (the gateway), a (a key for user:a), b (a key for user:b), ro
(a read-only key for user:a). Prints the report (see report.py); data hands the memory
it wrote to the Go side.
"""
import json

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from report import check, data, expect, read_input, run
from toolresult import result, text_of

ALL_TOOLS = ["add_memory", "append_turns", "delete_all_memories", "delete_memory", "end_session", "get_memories", "get_memory", "get_session",
             "promote_session", "recall_context", "search_memories", "summarize_session", "update_memory"]
READ_TOOLS = ["get_memories", "get_memory", "get_session", "recall_context", "search_memories"]


def connect(url, key):
    """A fastmcp Client for the gateway's /mcp with the key as a bearer token."""
    return Client(StreamableHttpTransport(url + "/mcp", headers={"Authorization": "Bearer " + key}))


async def call(c, name, args):
    """Call a tool that should succeed; an error is a failed check (and None the result)."""
    label = name + " " + json.dumps(args, ensure_ascii=False)[:80]
    try:
        res = await c.call_tool(name, args, raise_on_error=False)
    except Exception as e:  # noqa: BLE001 - an MCP error response is a failed check
        check(label + ": answered", False, "%s: %s" % (type(e).__name__, e), "a tool result")
        return None
    check(label + ": no tool error", not res.is_error, text_of(res), "a result")
    return result(res) if not res.is_error else None


async def tool_error(c, name, args):
    """The text of the tool error the call returns ('' if it succeeded)."""
    try:
        res = await c.call_tool(name, args, raise_on_error=False)
    except Exception as e:  # noqa: BLE001
        return "(not a tool error but %s: %s)" % (type(e).__name__, e)
    return text_of(res) if res.is_error else ""


async def main(inp):
    url = inp["url"]
    async with connect(url, inp["a"]) as a, connect(url, inp["b"]) as b, connect(url, inp["ro"]) as ro:
        # The MCP base protocol requires ping to be answered.
        for who, c in (("a", a), ("read-only", ro)):
            try:
                check("ping (%s)" % who, await c.ping(), False, True)
            except Exception as e:  # noqa: BLE001
                check("ping (%s)" % who, False, "%s: %s" % (type(e).__name__, e), "answered")
        expect("list_tools: the thirteen tools", sorted(t.name for t in await a.list_tools()), ALL_TOOLS)
        expect("read-only key: the five read tools", sorted(t.name for t in await ro.list_tools()), READ_TOOLS)

        w = await call(a, "add_memory", {"scope": "user:a", "text": "Keeps a spare key under the blue flowerpot", "key": "spare-key"})
        expect("add_memory outcome", (w or {}).get("outcome"), "inserted")
        mid = (w or {}).get("memory_id")
        s = await call(a, "search_memories", {"scope": "user:a", "query": "where is the spare key"})
        expect("search_memories finds it", [r["memory"]["memory_id"] for r in (s or {}).get("results", [])][:1], [mid])
        m = await call(a, "get_memory", {"memory_id": mid})
        expect("get_memory content", (m or {}).get("content"), {"text": "Keeps a spare key under the blue flowerpot"})

        # Refused as on the native API, with the same codes.
        for q in ("", "   "):
            err = await tool_error(a, "search_memories", {"scope": "user:a", "query": q})
            check("search_memories with query %r: invalid_request" % q, err.startswith("invalid_request"), err, "invalid_request: ...")
        err = await tool_error(a, "get_memory", {"memory_id": "a\u0000b"})
        check("get_memory with a NUL in the id: invalid_request", err.startswith("invalid_request"), err, "invalid_request: ...")
        err = await tool_error(b, "get_memory", {"memory_id": mid})
        check("b get_memory of a's memory: not_found", err.startswith("not_found"), err, "not_found: ...")
        err = await tool_error(b, "search_memories", {"scope": "user:a", "query": "spare key"})
        check("b search_memories user:a: scope_forbidden", err.startswith("scope_forbidden"), err, "scope_forbidden: ...")

    data("id", mid)


run(main(read_input()))
