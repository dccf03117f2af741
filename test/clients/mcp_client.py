"""The official Python MCP client (streamable HTTP) against the gateway's /mcp.

Input (stdin, JSON): url (the gateway), phase ("main" or "forget"), a (a key for
user:a), b (a key for user:b), ro (a read-only key for user:a), s (a key for user:s
and every session); for "forget", live
(how many memories user:a holds). Prints the report (see
report.py); data hands memory IDs to the Go side, which checks them through the native
API between the phases.
"""
import json
import warnings

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared._httpx_utils import create_mcp_http_client

from report import check, data, expect, read_input, run
from toolresult import result, text_of

ALL_TOOLS = ["add_memory", "append_turns", "delete_all_memories", "delete_memory", "end_session", "get_memories", "get_memory", "get_session",
             "promote_session", "recall_context", "search_memories", "summarize_session", "update_memory"]
READ_TOOLS = ["get_memories", "get_memory", "get_session", "recall_context", "search_memories"]


def connect(url, key):
    """A Client for the gateway's /mcp with the key as a bearer token."""
    http = create_mcp_http_client(headers={"Authorization": "Bearer " + key})
    return Client(streamable_http_client(url + "/mcp", http_client=http))


def allows_object(schema):
    """Whether a JSON schema fragment (its type keyword alone) admits an object."""
    if not isinstance(schema, dict):
        return schema is None
    t = schema.get("type")
    return t is None or t == "object" or (isinstance(t, list) and "object" in t)


async def tool_names(c):
    return sorted(t.name for t in (await c.list_tools()).tools)


async def call(c, name, args):
    """Call a tool that should succeed; a tool error, or an MCP error response, is a
    failed check (and None the result)."""
    label = name + " " + json.dumps(args, ensure_ascii=False)[:80]
    try:
        res = await c.call_tool(name, args)
    except MCPError as e:
        check(label + ": answered", False, "MCP error %s: %s" % (e.code, e.message), "a tool result")
        return None
    check(label + ": no tool error", not res.is_error, text_of(res), "a result")
    return result(res) if not res.is_error else None


async def tool_error(c, name, args):
    """The text of the tool error the call returns ('' if it succeeded; an MCP error
    response is reported as such, which no check expecting a tool error accepts)."""
    try:
        res = await c.call_tool(name, args)
    except MCPError as e:
        return "(not a tool error but MCP error %s: %s)" % (e.code, e.message)
    return text_of(res) if res.is_error else ""


async def main_phase(inp):
    url = inp["url"]
    async with connect(url, inp["a"]) as a, connect(url, inp["b"]) as b, connect(url, inp["ro"]) as ro:
        # The MCP base protocol requires ping to be answered (this client speaks the
        # sessionless 2026-07-28 protocol, whose ping the Go SDK alone would refuse).
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated in 2026-07-28, still required before
                await a.send_ping()
            check("ping is answered", True)
        except MCPError as e:
            check("ping is answered", False, "MCP error %s: %s" % (e.code, e.message), "an empty result")
        expect("list_tools: the thirteen tools", await tool_names(a), ALL_TOOLS)
        tools = {t.name: t for t in (await a.list_tools()).tools}
        check("add_memory's input schema has scope and text", {"scope", "text"} <= set(tools["add_memory"].input_schema.get("properties", {})),
              tools["add_memory"].input_schema, "properties scope and text")
        # Memory content is a JSON object: the schemas must let one through.
        for where, schema in (("add_memory input", tools["add_memory"].input_schema),
                              ("update_memory input", tools["update_memory"].input_schema),
                              ("get_memory output", tools["get_memory"].output_schema or {})):
            content = schema.get("properties", {}).get("content")
            check(where + " schema: content may be an object", allows_object(content), content, "a schema an object satisfies")

        # add_memory: text, and content of another type.
        w1 = await call(a, "add_memory", {"scope": "user:a", "text": "Prefers green tea in the afternoon", "key": "drink"})
        expect("add_memory outcome", (w1 or {}).get("outcome"), "inserted")
        w2 = await call(a, "add_memory", {"scope": "user:a", "content": {"event": "order A1024 not shipped yet", "order": "A1024"}, "memory_type": "episodic"})
        expect("add_memory (content, episodic) outcome", (w2 or {}).get("outcome"), "inserted")
        w3 = await call(a, "add_memory", {"text": "Address first, then the delivery time", "memory_type": "procedural"})
        expect("add_memory without a scope uses the key's one scope", (w3 or {}).get("outcome"), "inserted")
        id1, id2, id3 = [(w or {}).get("memory_id") for w in (w1, w2, w3)]
        # b writes into its own scope.
        wb = await call(b, "add_memory", {"scope": "user:b", "text": "Prefers green tea too, with honey"})

        # search_memories: best first, within user:a only.
        s = await call(a, "search_memories", {"scope": "user:a", "query": "green tea afternoon", "top_k": 5})
        hits = [r["memory"]["memory_id"] for r in (s or {}).get("results", [])]
        check("search_memories finds the tea preference first", hits[:1] == [id1], hits, [id1, "..."])
        check("search_memories stays in user:a", all(r["memory"]["scope"] == "user:a" for r in (s or {}).get("results", [])),
              [r["memory"]["scope"] for r in (s or {}).get("results", [])], "only user:a")
        check("search_memories results carry a similarity", all(isinstance(r.get("similarity"), (int, float)) for r in (s or {}).get("results", [])) and bool(hits),
              (s or {}).get("results"), "a similarity on each")
        check("search_memories results say why (channels)", all(set(r.get("why", {}).get("channels", [])) <= {"dense", "lexical"} and r["why"]["channels"] for r in (s or {}).get("results", [])) and bool(hits),
              (s or {}).get("results"), "why.channels on each")
        # A word only one memory has is found by the lexical channel.
        s = await call(a, "search_memories", {"scope": "user:a", "query": "A1024", "mode": "lexical"})
        expect("search_memories mode lexical finds the order by its number", [r["memory"]["memory_id"] for r in (s or {}).get("results", [])], [id2])
        # recall_context: the latest turns raw (the episodic memory), and search results that never repeat them.
        rc = await call(a, "recall_context", {"scope": "user:a", "query": "green tea order", "recent_turns": 3})
        expect("recall_context recent turns", [m["memory_id"] for m in (rc or {}).get("recent", [])], [id2])
        check("recall_context results never repeat a turn", id2 not in [r["memory"]["memory_id"] for r in (rc or {}).get("results", [])] and bool((rc or {}).get("results")),
              (rc or {}).get("results"), "results without " + str(id2))
        if id2:
            s = await call(a, "search_memories", {"scope": "user:a", "query": "order shipped", "types": ["episodic"]})
            expect("search_memories with a type filter", [r["memory"]["memory_id"] for r in (s or {}).get("results", [])], [id2])

        # An empty query is refused, as on the native API.
        for q in ("", "  "):
            err = await tool_error(a, "search_memories", {"scope": "user:a", "query": q})
            check("search_memories with query %r: invalid_request" % q, err.startswith("invalid_request"), err, "invalid_request: ...")

        # get_memories and get_memory.
        g = await call(a, "get_memories", {"scope": "user:a"})
        expect("get_memories lists user:a", sorted((m["memory_id"] for m in (g or {}).get("memories", [])), key=str), sorted([id1, id2, id3], key=str))
        if id2:
            m = await call(a, "get_memory", {"memory_id": id2})
            expect("get_memory content", (m or {}).get("content"), {"event": "order A1024 not shipped yet", "order": "A1024"})
            expect("get_memory scope and type", ((m or {}).get("scope"), (m or {}).get("memory_type")), ("user:a", "episodic"))

        # update_memory: the new content, the old one in the history.
        u = await call(a, "update_memory", {"memory_id": id1, "text": "Now prefers oolong in the afternoon"})
        expect("update_memory content", (u or {}).get("content"), {"text": "Now prefers oolong in the afternoon"})
        expect("update_memory keeps the history", [h.get("content") for h in (u or {}).get("history", [])], [{"text": "Prefers green tea in the afternoon"}])

        # delete_memory, then get_memory is a not_found tool error.
        d = await call(a, "delete_memory", {"memory_id": id3})
        expect("delete_memory", d, {"deleted": id3})
        err = await tool_error(a, "get_memory", {"memory_id": id3})
        check("get_memory after delete_memory: not_found", err.startswith("not_found"), err, "not_found: ...")

        # Isolation: b's key gets tool errors for user:a and never sees its memories.
        err = await tool_error(b, "search_memories", {"scope": "user:a", "query": "green tea"})
        check("b search_memories user:a: scope_forbidden", err.startswith("scope_forbidden"), err, "scope_forbidden: ...")
        err = await tool_error(b, "get_memories", {"scope": "user:a"})
        check("b get_memories user:a: scope_forbidden", err.startswith("scope_forbidden"), err, "scope_forbidden: ...")
        err = await tool_error(b, "add_memory", {"scope": "user:a", "text": "planted by b"})
        check("b add_memory user:a: scope_forbidden", err.startswith("scope_forbidden"), err, "scope_forbidden: ...")
        err = await tool_error(b, "get_memory", {"memory_id": id1})
        check("b get_memory of a's memory: not_found", err.startswith("not_found"), err, "not_found: ...")
        err = await tool_error(b, "update_memory", {"memory_id": id1, "text": "overwritten by b"})
        check("b update_memory of a's memory: not_found", err.startswith("not_found"), err, "not_found: ...")
        err = await tool_error(b, "delete_memory", {"memory_id": id1})
        check("b delete_memory of a's memory: not_found", err.startswith("not_found"), err, "not_found: ...")
        err = await tool_error(b, "delete_all_memories", {"scope": "user:a"})
        check("b delete_all_memories user:a: scope_forbidden", err.startswith("scope_forbidden"), err, "scope_forbidden: ...")
        s = await call(b, "search_memories", {"query": "green tea"})
        check("b search_memories (its own scope) sees only user:b",
              [r["memory"]["scope"] for r in (s or {}).get("results", [])] == ["user:b"],
              [r["memory"]["scope"] for r in (s or {}).get("results", [])], ["user:b"])

        # A read-only key lists only the read tools, and they work.
        expect("read-only key: the five read tools", await tool_names(ro), READ_TOOLS)
        g = await call(ro, "get_memories", {"scope": "user:a"})
        expect("read-only get_memories", sorted((m["memory_id"] for m in (g or {}).get("memories", [])), key=str), sorted([id1, id2], key=str))
        try:
            res = await ro.call_tool("add_memory", {"scope": "user:a", "text": "written by a read-only key"})
            check("read-only add_memory is refused", res.is_error, text_of(res), "an error (no such tool)")
        except MCPError as e:
            check("read-only add_memory is refused", True, "MCP error %s: %s" % (e.code, e.message), "an error (no such tool)")

    data("ids", {"updated": id1, "episodic": id2, "deleted": id3, "b": (wb or {}).get("memory_id")})
    await session_tools(inp)


async def session_tools(inp):
    """The session tools (short-term memory): a conversation appended, read, ended and
    found again as episodic memories of its owner; another user's key cannot reach it."""
    url = inp["url"]
    async with connect(url, inp["s"]) as s, connect(url, inp["b"]) as b:
        ap = await call(s, "append_turns", {"session": "session:py-1", "owner": "user:s", "turns": [
            {"role": "user", "text": "I just moved to Porto"},
            {"role": "assistant", "content": {"text": "Welcome to Porto!", "tool_calls": []}}]})
        expect("append_turns numbers the turns", [t["seq"] for t in (ap or {}).get("turns", [])], [1, 2])
        gs = await call(s, "get_session", {"session": "session:py-1", "last": 1})
        expect("get_session last 1", [t["content"] for t in (gs or {}).get("turns", [])], [{"text": "Welcome to Porto!", "tool_calls": []}])
        expect("get_session owner", (gs or {}).get("owner"), "user:s")
        err = await tool_error(b, "get_session", {"session": "session:py-1"})
        check("b get_session of s's session: scope_forbidden", err.startswith("scope_forbidden"), err, "scope_forbidden: ...")
        en = await call(s, "end_session", {"session": "session:py-1"})
        expect("end_session promotes both turns", (en or {}).get("promoted"), 2)
        err = await tool_error(s, "get_session", {"session": "session:py-1"})
        check("get_session after end_session: not_found", err.startswith("not_found"), err, "not_found: ...")
        sr = await call(s, "search_memories", {"scope": "user:s", "query": "Porto"})
        found = [r["memory"] for r in (sr or {}).get("results", [])]
        check("the promoted turns are found by search", len(found) == 2 and all(m["memory_type"] == "episodic" for m in found),
              found, "two episodic memories")


async def forget_phase(inp):
    async with connect(inp["url"], inp["a"]) as a, connect(inp["url"], inp["b"]) as b:
        f = await call(a, "delete_all_memories", {"scope": "user:a", "reason": "user asked to be forgotten"})
        expect("delete_all_memories", ((f or {}).get("scope"), (f or {}).get("deleted")), ("user:a", inp["live"]))
        g = await call(a, "get_memories", {"scope": "user:a"})
        expect("get_memories after delete_all_memories", (g or {}).get("memories"), [])
        s = await call(a, "search_memories", {"scope": "user:a", "query": "oolong"})
        expect("search_memories after delete_all_memories", (s or {}).get("results"), [])
        g = await call(b, "get_memories", {"scope": "user:b"})
        expect("user:b is untouched", len((g or {}).get("memories", [])), 1)


inp = read_input()
run(main_phase(inp) if inp["phase"] == "main" else forget_phase(inp))
