"""Writes LangGraph checkpoints and store items whose users and threads are named in
any language, with LangGraph itself (langgraph-checkpoint-sqlite, -postgres), for
TestGuaranteeImportUnicodeIdentities. Threads and items are given as JSON on stdin:

  {"threads": [{"thread_id": "...", "user_id": "..." | null, "turns": ["...", ...]}],
   "items": [{"namespace": [...], "key": "...", "value": {...}}]}

  --sqlite PATH        SqliteSaver and SqliteStore in this file
  --postgres-dsn DSN   PostgresSaver and PostgresStore in this database

A turn is a human message and the agent's scripted reply ("re: <message>"). The user
id, when given, goes in the run's configurable, so LangGraph copies it into the
checkpoint metadata, as applications do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph


def agent(state: MessagesState) -> dict:
    return {"messages": [AIMessage(content="re: " + state["messages"][-1].content)]}


def build_graph() -> StateGraph:
    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    return g


def run(saver, store, spec: dict) -> None:
    saver.setup()
    app = build_graph().compile(checkpointer=saver)
    for th in spec["threads"]:
        conf = {"thread_id": th["thread_id"]}
        if th.get("user_id") is not None:
            conf["user_id"] = th["user_id"]
        for text in th["turns"]:
            app.invoke({"messages": [HumanMessage(content=text)]}, {"configurable": conf})
        st = app.get_state({"configurable": {"thread_id": th["thread_id"]}})
        if len(st.values["messages"]) != 2 * len(th["turns"]):
            raise SystemExit(f"thread {th['thread_id']!r}: {len(st.values['messages'])} messages")
    store.setup()
    for it in spec["items"]:
        store.put(tuple(it["namespace"]), it["key"], it["value"])
        if store.get(tuple(it["namespace"]), it["key"]) is None:
            raise SystemExit(f"store item {it!r} not found back")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sqlite")
    ap.add_argument("--postgres-dsn")
    args = ap.parse_args()
    spec = json.load(sys.stdin)
    if args.sqlite:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        with contextlib.closing(sqlite3.connect(args.sqlite, check_same_thread=False)) as conn, \
                contextlib.closing(sqlite3.connect(args.sqlite, check_same_thread=False, isolation_level=None)) as stconn:
            run(SqliteSaver(conn), SqliteStore(stconn), spec)
        # Fold the WAL into the database file, so the file alone is the whole database.
        with contextlib.closing(sqlite3.connect(args.sqlite)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if args.postgres_dsn:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore

        with PostgresSaver.from_conn_string(args.postgres_dsn) as saver, PostgresStore.from_conn_string(args.postgres_dsn) as store:
            run(saver, store, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
