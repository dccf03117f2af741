#!/usr/bin/env python3
"""Writes real LlamaIndex chat data for the importer tests, and its ground truth.

llama-index-core's own stores, written offline (no LLM): a SimpleChatStore persisted to
JSON (--path/chat_store.json), a SQLiteChatStore (--path/chat_store.db) and a Memory
whose SQLAlchemyChatStore keeps its chat history in SQLite (--path/memory.db), with a
token limit small enough that older messages are archived (flushed out of the window).

Every store holds the same sessions, keyed "u-<user>:sess-<n>" (one user "zoë"),
each a support conversation: user questions, assistant answers, assistant tool calls
(OpenAI style, in additional_kwargs) with the tool's results, a message of two text
blocks, and Chinese.

--out writes expected.json: per store, what the store itself returns for every key
(get_messages / Memory.get_all), as ChatMessage.model_dump(mode="json").
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time

from llama_index.core.base.llms.types import ChatMessage, TextBlock
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index.storage.chat_store.sqlite import SQLiteChatStore


def conversation(rng: random.Random, user: str, n: int) -> list[ChatMessage]:
    zh = user.startswith("2")
    msgs: list[ChatMessage] = []
    for turn in range(n):
        order = f"A-{rng.randint(10, 99)}"
        if zh:
            msgs.append(ChatMessage(role="user", content=f"订单 {order} 什么时候到？"))
        else:
            msgs.append(ChatMessage(role="user", content=f"When does order {order} arrive?"))
        if turn % 2 == 0:
            call = {"id": f"call_{user}_{turn}", "type": "function",
                    "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": order, "fields": ["eta", "carrier"]})}}
            msgs.append(ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [call]}))
            msgs.append(ChatMessage(role="tool", content=json.dumps({"eta": "Friday", "carrier": "DHL"}),
                                    additional_kwargs={"tool_call_id": call["id"], "name": "lookup_order"}))
        if turn == 1:
            msgs.append(ChatMessage(role="assistant", blocks=[TextBlock(text=f"Order {order} arrives Friday."),
                                                               TextBlock(text="Anything else?")]))
        else:
            msgs.append(ChatMessage(role="assistant", content=f"订单 {order} 周五送达。" if zh else f"Order {order} arrives on Friday."))
    return msgs


def dump(msgs) -> list[dict]:
    return [m.model_dump(mode="json") for m in msgs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True)
    ap.add_argument("--users", type=int, default=6)
    ap.add_argument("--sessions", type=int, default=2, help="sessions per user")
    ap.add_argument("--turns", type=int, default=4, help="user turns per session")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stores", default="json,sqlite,memory")
    ap.add_argument("--no-truth", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    os.makedirs(args.path, exist_ok=True)
    t0 = time.monotonic()
    rng = random.Random(args.seed)
    users = ["zoë"] + [f"{1000 + i}" if i % 2 else f"{2000 + i}" for i in range(1, args.users)]
    sessions = {}
    for u in users:
        for s in range(args.sessions):
            sessions[f"u-{u}:sess-{s}"] = conversation(rng, u, args.turns)
    stores = args.stores.split(",")
    expected: dict = {"seed": args.seed, "users": users, "keys": sorted(sessions), "stores": {}}

    if "json" in stores:
        cs = SimpleChatStore()
        for key, msgs in sessions.items():
            cs.set_messages(key, msgs[:1])
            for m in msgs[1:]:
                cs.add_message(key, m)
        path = os.path.join(args.path, "chat_store.json")
        cs.persist(path)
        back = SimpleChatStore.from_persist_path(path)
        expected["stores"]["json"] = {k: dump(back.get_messages(k)) for k in sessions} if not args.no_truth else {}
    if "sqlite" in stores:
        path = os.path.join(args.path, "chat_store.db")
        sq = SQLiteChatStore.from_uri("sqlite:///" + os.path.abspath(path))
        for key, msgs in sessions.items():
            sq.set_messages(key, msgs[:2])
            for m in msgs[2:]:
                sq.add_message(key, m)
        expected["stores"]["sqlite"] = {k: dump(sq.get_messages(k)) for k in sessions} if not args.no_truth else {}
    if "memory" in stores:
        path = os.path.join(args.path, "memory.db")
        got = {}
        for key, msgs in sessions.items():
            mem = Memory.from_defaults(session_id=key, token_limit=120, chat_history_token_ratio=0.5, token_flush_size=40,
                                       async_database_uri="sqlite+aiosqlite:///" + os.path.abspath(path))
            for m in msgs:
                mem.put(m)
            if not args.no_truth:
                got[key] = dump(mem.get_all())
        expected["stores"]["memory"] = got
    expected["timings_s"] = {"total": round(time.monotonic() - t0, 3)}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, indent=1)
    print(json.dumps({"sessions": len(sessions), "timings_s": expected["timings_s"]}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
