#!/usr/bin/env python3
"""Generates real LangGraph source data for the importer tests, and its ground truth.

A customer-service agent (seed 000, section 4) built the way LangGraph apps are built:
`StateGraph(MessagesState)`, a scripted "model" node (no LLM, no network) that answers
directly, answers in content blocks, or calls real `@tool`s through `ToolNode` +
`tools_condition`. Every thread is run through LangGraph itself and written by the real
checkpointers:

  --postgres-dsn DSN      PostgresSaver (+ .setup()) and PostgresStore (+ .setup())
  --sqlite PATH           SqliteSaver with the same checkpoints, and SqliteStore
  --langchain-table NAME  langchain_postgres.PostgresChatMessageHistory sessions (same DSN)

When both savers are given the graph runs on PostgreSQL and every checkpoint and pending
write is then put into the SqliteSaver through its public put/put_writes API (how one
moves between savers), so both hold the same checkpoint ids, timestamps and messages; the
script checks that get_state agrees on both.

Scenarios, all decided by --seed: the user id in `configurable` (so LangGraph copies it
into the checkpoint metadata) or only in the thread id (`u-<user>:sess-<n>`); threads
whose last activity is 10-40 days old (run under time_machine.travel, so the checkpoint
ts and the uuid6 checkpoint ids really are old); ~30% zombies: the node raises (an
`__error__` write is left), or the only turn never got a reply (interrupted before the
agent ran, or a message added with update_state); multi-turn threads; with --pending-writes, threads whose one turn's answer is a pending
write of the latest checkpoint (a parallel approval branch called interrupt()).

--out writes expected.json: what LangGraph itself reports (get_state) for every thread,
what the stores return, what the chat history returns, and the package versions.

Sizes (2 cores): the default (50 users x 4 threads, ~1,600 messages) takes ~5 s. Bulk
runs use --durability exit (one checkpoint per turn instead of per step) and --workers 2:
--users 500 --threads-per-user 5 --turns 12-24 gives ~95k messages in ~65 s;
--users 500 --threads-per-user 40 --turns 12-24 --no-messages gives ~756k messages
(20,000 threads, 1.3 GB database) in ~11 min.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import importlib.metadata as md
import json
import multiprocessing
import random
import sqlite3
import sys
import time
import uuid
from collections import defaultdict
from typing import Any

import ormsgpack
import time_machine
from pydantic import BaseModel
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _msgpack_ext_hook_to_json
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, messages_to_dict
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

UTC = dt.timezone.utc

# ---------------------------------------------------------------------------------------
# The business data the tools read (filled from the plan before anything runs).
ORDERS: dict[str, dict[str, Any]] = {}
ADDRESSES: dict[str, dict[str, Any]] = {}


@tool
def lookup_order(order_id: str) -> dict:
    """Look up an order's status, items and shipping state by its id."""
    o = ORDERS.get(order_id)
    if o is None:
        return {"order_id": order_id, "found": False}
    return {"order_id": order_id, "found": True, **o}


@tool(response_format="content_and_artifact")
def confirm_address(user_id: str) -> tuple[str, dict]:
    """Fetch the delivery address on file for a user so it can be confirmed."""
    a = ADDRESSES.get(user_id, {})
    return "address on file: " + ", ".join(str(v) for v in a.values()), dict(a)


@tool
def schedule_delivery(order_id: str, address: dict, time_windows: list[str]) -> dict:
    """Schedule the delivery of an order to a confirmed address in one of the time windows."""
    return {"order_id": order_id, "scheduled": True, "window": time_windows[0], "address": address}


@tool
def update_preferences(user_id: str, preferences: dict, tags: list[str]) -> dict:
    """Save a user's standing preferences (structured) with some tags."""
    return {"user_id": user_id, "saved": sorted(preferences), "tags": tags}


@tool
def search_faq(query: str, top_k: int = 2) -> list:
    """Search the help-centre FAQ; returns content blocks."""
    return [{"type": "text", "text": f"FAQ #{i + 1} for '{query}'"} for i in range(top_k)]


TOOLS = [lookup_order, confirm_address, schedule_delivery, update_preferences, search_faq]

# ---------------------------------------------------------------------------------------
# The scripted model: the plan says, per thread and turn, what each agent step returns.
PLANS: dict[str, dict[str, Any]] = {}


class ScriptedFailure(RuntimeError):
    pass


def agent(state: MessagesState, config) -> dict:
    thread_id = config["configurable"]["thread_id"]
    plan = PLANS[thread_id]
    msgs = state["messages"]
    last_human = max(i for i, m in enumerate(msgs) if m.type == "human")
    turn_idx = sum(1 for m in msgs if m.type == "human") - 1
    step = sum(1 for m in msgs[last_human:] if m.type == "ai")
    turn = plan["turns"][turn_idx]
    if turn.get("fail_at") == step:
        raise ScriptedFailure(turn["error"])
    spec = turn["steps"][step]
    return {"messages": [AIMessage(**spec)]}


def build_graph() -> StateGraph:
    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(TOOLS))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g


def approval(state: MessagesState) -> dict:
    """Asks a human to approve (LangGraph's interrupt()), in parallel with the agent."""
    interrupt({"question": "Approve the refund?"})
    return {}


def build_parallel_graph() -> StateGraph:
    """The agent and a human approval run as parallel branches of one superstep: the
    approval interrupts, so the superstep never completes and the agent's answer stays a
    pending write of the latest checkpoint, which get_state() shows."""
    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("approval", approval)
    g.add_edge(START, "agent")
    g.add_edge(START, "approval")
    return g


class Profile(BaseModel):
    """A support app's customer profile, kept in a state channel of its own."""
    name: str
    tier: str
    since: dt.date


@dataclasses.dataclass
class Prefs:
    language: str
    contact: list[str]


class Citation(BaseModel):
    source: str
    doc_id: str


class ProfileState(MessagesState):
    profile: Profile
    prefs: Prefs
    last_seen: dt.datetime
    tags: set[str]
    notes: str


def profile_agent(state: ProfileState, config) -> dict:
    """Answers as agent() does and keeps what it learned in the custom channels; its
    answer carries a Pydantic object in additional_kwargs."""
    out = agent(state, config)
    th = PLANS[config["configurable"]["thread_id"]]
    c = th["custom"]
    msg = out["messages"][0]
    msg.additional_kwargs = {"citation": Citation(source="kb", doc_id=c["doc_id"])}
    return {"messages": [msg], "profile": Profile(name=c["name"], tier=c["tier"], since=dt.date.fromisoformat(c["since"])),
            "prefs": Prefs(language=c["language"], contact=list(c["contact"])),
            "last_seen": dt.datetime.fromisoformat(c["last_seen"]), "tags": set(c["tags"]), "notes": c["notes"]}


def build_profile_graph() -> StateGraph:
    """One node that answers and fills the custom state channels (LangGraph's JsonPlus
    extension types: a Pydantic model, a dataclass, a datetime, a set)."""
    g = StateGraph(ProfileState)
    g.add_node("agent", profile_agent)
    g.add_edge(START, "agent")
    return g


GRAPHS = {"pending_write": build_parallel_graph, "custom_state": build_profile_graph}

# The custom channels as LangGraph's own JSON reviver reads their stored bytes (what an
# import must find).
SERDE = JsonPlusSerializer()


def reviver_json(value: Any) -> Any:
    typ, data = SERDE.dumps_typed(value)
    if typ != "msgpack":
        return value
    return ormsgpack.unpackb(data, ext_hook=_msgpack_ext_hook_to_json, option=ormsgpack.OPT_NON_STR_KEYS)


def compile_apps(saver) -> dict:
    """The compiled graph of every scenario ("" for the customer-service graph)."""
    apps = {"": build_graph().compile(checkpointer=saver)}
    for scenario, build in GRAPHS.items():
        apps[scenario] = build().compile(checkpointer=saver)
    return apps


def app_of(apps: dict, th: dict):
    return apps.get(th["scenario"], apps[""])


# ---------------------------------------------------------------------------------------
# The plan: users, their facts, threads, turns. Only `rng` decides anything here.

ZH_DISTRICTS = ["朝阳区", "海淀区", "东城区", "西城区"]
ZH_STREETS = ["建国路", "中关村大街", "望京街", "金融大街"]
EN_CITIES = [("Seattle", "WA", "981"), ("Austin", "TX", "787"), ("Boston", "MA", "021")]
EN_STREETS = ["Pine St", "Maple Ave", "Harbor Rd", "Elm St"]
ITEMS_EN = ["ceramic mug set", "pour-over kettle", "burr grinder", "espresso cups"]
ITEMS_ZH = ["陶瓷马克杯套装", "手冲壶", "磨豆机", "意式咖啡杯"]
WINDOWS = ["09:00-12:00", "14:00-16:00", "16:00-18:00", "19:00-21:00"]


class Ids:
    """Deterministic ids in the shapes real providers use."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def run(self) -> str:
        return "lc_run--" + self.uuid()

    def call(self) -> str:
        return "call_" + "".join(self.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") for _ in range(24))


def usage(rng: random.Random) -> dict:
    i, o = rng.randint(120, 900), rng.randint(8, 120)
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


def ai(ids: Ids, rng: random.Random, content: Any, tool_calls: list | None = None) -> dict:
    spec: dict[str, Any] = {
        "content": content,
        "id": ids.run(),
        "usage_metadata": usage(rng),
        "response_metadata": {"model_name": "scripted-cs-agent", "finish_reason": "tool_calls" if tool_calls else "stop"},
    }
    if tool_calls:
        spec["tool_calls"] = tool_calls
    return spec


def tc(ids: Ids, name: str, args: dict) -> dict:
    return {"name": name, "args": args, "id": ids.call(), "type": "tool_call"}


def blocks(text: str) -> list:
    return [{"type": "text", "text": text}]


def tool_call_turn(ids: Ids, rng: random.Random, human: Any, calls: list[dict], intro: str, answer: Any) -> dict:
    """A turn in which the model first calls tools, then answers. Half the time the tool
    call comes Anthropic-style: content blocks with a tool_use block next to tool_calls."""
    if rng.random() < 0.5:
        content: Any = [{"type": "text", "text": intro}] + [
            {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in calls
        ]
    else:
        content = ""
    return {"human": human, "steps": [ai(ids, rng, content, calls), ai(ids, rng, answer)]}


def maybe_blocks(rng: random.Random, text: str, p: float = 0.3) -> Any:
    return blocks(text) if rng.random() < p else text


def topic_turns(topic: str, u: dict, ids: Ids, rng: random.Random) -> list[dict]:
    zh = u["lang"] == "zh"
    uid = u["user_id"]
    if topic == "coffee":
        t = u["coffee"]["temperature"]
        pref = {"coffee": dict(u["coffee"])}
        if zh:
            word = "热的" if t == "hot" else "冰的"
            other = "冰的" if t == "hot" else "热的"
            human = f"以后咖啡都给我换成{word}，不要{other}，也不要加糖。"
            intro, answer = "好的，我来更新您的偏好。", f"好的，已为您记录：以后咖啡一律做{word}，不加糖。"
        else:
            word, other = (t, "iced" if t == "hot" else "hot")
            human = f"From now on please make my coffee {word}, not {other}, and no sugar."
            intro, answer = "Sure, updating your preferences.", f"Done: from now on your coffee will be {word}, with no sugar."
        return [tool_call_turn(ids, rng, human, [tc(ids, "update_preferences", {"user_id": uid, "preferences": pref, "tags": ["drink", "standing-order"]})], intro, maybe_blocks(rng, answer))]
    if topic == "order":
        o = ORDERS[u["order_id"]]
        if zh:
            human = f"我之前有个订单 {u['order_id']} 一直没发货，帮我查一下？"
            intro = "我查一下这个订单。"
            answer = f"订单 {u['order_id']}（{o['items'][0]['name']}）于 {o['placed_at']} 下单，目前还没有发货，仓库在等补货，我已经帮您加急处理。"
        else:
            human = f"My order {u['order_id']} still hasn't shipped. Can you check what's going on?"
            intro = "Let me look that order up."
            answer = f"Order {u['order_id']} ({o['items'][0]['name']}) was placed on {o['placed_at']} and has not shipped yet; the warehouse is waiting for stock. I've flagged it for priority dispatch."
        return [tool_call_turn(ids, rng, human, [tc(ids, "lookup_order", {"order_id": u["order_id"]})], intro, maybe_blocks(rng, answer))]
    if topic == "procedure":
        a = u["address"]
        w = rng.sample(WINDOWS, 2)
        addr = "".join(str(v) for v in a.values()) if zh else ", ".join(str(v) for v in a.values())
        if zh:
            h1 = "还是老规矩，先确认地址，再问配送时间。"
            intro1 = "好的，先确认您的地址。"
            a1 = f"您登记的地址是{addr}，请问地址是否正确？确认后请告诉我您方便的配送时间：{w[0]} 还是 {w[1]}？"
            h2 = f"地址没错，{w[0]} 送吧。"
            intro2 = "好的，为您安排配送。"
            a2 = f"已安排订单 {u['order_id']} 在 {w[0]} 送到{addr}。"
        else:
            h1 = "Same as usual: confirm my address first, then ask me about the delivery time."
            intro1 = "Sure, confirming your address first."
            a1 = f"The address on file is {addr}. Is that still correct? Once confirmed, which delivery time suits you: {w[0]} or {w[1]}?"
            h2 = f"Yes, the address is right. {w[0]} please."
            intro2 = "Great, scheduling it now."
            a2 = f"Order {u['order_id']} is scheduled for {w[0]} to {addr}."
        return [
            tool_call_turn(ids, rng, h1, [tc(ids, "confirm_address", {"user_id": uid})], intro1, blocks(a1)),
            tool_call_turn(ids, rng, h2, [tc(ids, "schedule_delivery", {"order_id": u["order_id"], "address": dict(a), "time_windows": [w[0]]})], intro2, maybe_blocks(rng, a2)),
        ]
    if topic == "old_order":
        oid = u["old_order_id"]
        if zh:
            human, intro, answer = f"我很久以前的订单 {oid} 送到了吗？", "我查一下。", f"订单 {oid} 已经签收了。"
        else:
            human, intro, answer = f"Did my old order {oid} arrive?", "Checking.", f"Order {oid} was delivered and signed for."
        return [tool_call_turn(ids, rng, human, [tc(ids, "lookup_order", {"order_id": oid})], intro, answer)]
    # fillers: direct answers, content blocks, a list-shaped human message, a tool that
    # returns content blocks, parallel tool calls
    kind = rng.choice(["hours", "oat", "refund", "faq", "thanks", "both"])
    if kind == "hours":
        return [{"human": "你们几点上班？" if zh else "What are your opening hours?", "steps": [ai(ids, rng, "我们每天 9:00 到 21:00 在线。" if zh else "We're here every day from 9:00 to 21:00.")]}]
    if kind == "oat":
        human = blocks("有燕麦奶吗？" if zh else "Do you have oat milk?")
        return [{"human": human, "steps": [ai(ids, rng, blocks("有的，所有饮品都可以换燕麦奶。" if zh else "Yes, every drink can be made with oat milk."))]}]
    if kind == "refund":
        return [{"human": "杯子到了是碎的能退款吗？" if zh else "Can I get a refund if the cups arrive broken?", "steps": [ai(ids, rng, "可以，7 天内拍照发给我们即可全额退款。" if zh else "Yes: send us a photo within 7 days and we refund in full.")]}]
    if kind == "faq":
        q = "退货流程" if zh else "return policy"
        return [tool_call_turn(ids, rng, ("退货流程是什么？" if zh else "What is your return policy?"), [tc(ids, "search_faq", {"query": q, "top_k": 2})], "我查一下帮助中心。" if zh else "Searching the help centre.", "退货请在 30 天内申请。" if zh else "Returns are accepted within 30 days.")]
    if kind == "both":
        human = "帮我看看订单和地址。" if zh else "Can you check my order and my address?"
        calls = [tc(ids, "lookup_order", {"order_id": u["order_id"]}), tc(ids, "confirm_address", {"user_id": uid})]
        return [tool_call_turn(ids, rng, human, calls, "我同时查一下订单和地址。" if zh else "Checking both.", "订单还在等补货，地址没有变化。" if zh else "The order is still waiting for stock, and your address is unchanged.")]
    return [{"human": "谢谢！" if zh else "Thanks!", "steps": [ai(ids, rng, "不客气！" if zh else "You're welcome!")]}]


def make_users(n: int, rng: random.Random, ids: Ids, now: dt.datetime) -> list[dict]:
    users = []
    for i in range(n):
        uid = str(1000 + i)
        zh = rng.random() < 0.5
        if zh:
            address = {"city": "北京", "district": rng.choice(ZH_DISTRICTS), "street": f"{rng.choice(ZH_STREETS)}{rng.randint(1, 300)}号"}
        else:
            city, state, zp = rng.choice(EN_CITIES)
            address = {"street": f"{rng.randint(1, 999)} {rng.choice(EN_STREETS)}", "city": city, "state": state, "zip": f"{zp}{rng.randint(10, 99)}"}
        order_id = f"A-{uid}{rng.randint(10, 99)}"
        old_order_id = f"B-{uid}{rng.randint(10, 99)}"
        item = rng.randrange(len(ITEMS_EN))
        ORDERS[order_id] = {
            "status": "not_shipped",
            "placed_at": (now - dt.timedelta(days=rng.randint(8, 20))).date().isoformat(),
            "items": [{"sku": f"SKU-{item}", "name": (ITEMS_ZH if zh else ITEMS_EN)[item], "qty": rng.randint(1, 3)}],
            "carrier": None,
        }
        ORDERS[old_order_id] = {"status": "delivered", "placed_at": (now - dt.timedelta(days=rng.randint(45, 90))).date().isoformat(), "items": [], "carrier": "SF" if zh else "UPS"}
        ADDRESSES[uid] = address
        users.append({
            "user_id": uid,
            "lang": "zh" if zh else "en",
            "coffee": {"temperature": "hot" if rng.random() < 0.7 else "iced", "sugar": "none"},
            "order_id": order_id,
            "old_order_id": old_order_id,
            "address": address,
        })
    return users


def make_plan(args, rng: random.Random, now: dt.datetime) -> tuple[list[dict], list[dict]]:
    ids = Ids(rng)
    users = make_users(args.users, rng, ids, now)
    tmin, tmax = (int(x) for x in args.turns.split("-"))
    threads = []
    for u in users:
        scen = []
        for _ in range(args.threads_per_user):
            r = rng.random()
            scen.append("zombie_error" if r < 0.14 else "zombie_no_reply" if r < 0.28 else "old" if r < 0.45 else "normal")
        if "normal" not in scen and scen:
            scen[0] = "normal"
        normal = [i for i, s in enumerate(scen) if s == "normal"]
        facts: dict[int, list[str]] = defaultdict(list)
        for k, topic in enumerate(["coffee", "order", "procedure"]):
            facts[normal[k % len(normal)]].append(topic)
        for n, s in enumerate(scen):
            from_tid = rng.random() < 0.2
            tid = f"u-{u['user_id']}:sess-{n}" if from_tid else ids.uuid()
            th = {
                "thread_id": tid,
                "user_id": u["user_id"],
                "user_from": "thread_id" if from_tid else "metadata",
                "scenario": s,
                "channel": rng.choice(["web", "app", "wechat" if u["lang"] == "zh" else "email"]),
                "lang": u["lang"],
            }
            turns: list[dict] = []
            topics: list[str] = []
            if s in ("normal", "old"):
                want = rng.randint(tmin, tmax)
                chosen = list(facts.get(n, [])) if s == "normal" else ["old_order"]
                for topic in chosen:
                    turns += topic_turns(topic, u, ids, rng)
                    topics.append(topic)
                while len(turns) < want:
                    turns += topic_turns("filler", u, ids, rng)
                    topics.append("filler")
            else:
                # A zombie's content carries a marker no kept thread has, so a recall
                # test can prove nothing of it was imported.
                marker = f"Z-{u['user_id']}{n}{rng.randint(100, 999)}"
                ORDERS[marker] = {"status": "cancel_requested", "placed_at": now.date().isoformat(), "items": [], "carrier": None}
                human = f"请取消订单 {marker} 并退款。" if u["lang"] == "zh" else f"Please cancel order {marker} and refund me."
                th["marker"] = marker
                topics.append("zombie")
                if s == "zombie_error":
                    if rng.random() < 0.5:
                        th["detail"] = "error_first_step"
                        turns.append({"human": human, "steps": [], "fail_at": 0, "error": "upstream model timeout"})
                    else:
                        th["detail"] = "error_after_tool"
                        turns.append({"human": human, "steps": [ai(ids, rng, "", [tc(ids, "lookup_order", {"order_id": marker})])], "fail_at": 1, "error": "context length exceeded"})
                else:
                    th["detail"] = rng.choice(["interrupted", "update_state"])
                    turns.append({"human": human, "steps": []})
            th["topics"] = topics
            th["turns"] = turns
            # When each turn happens (relative to now; the absolute times are recorded).
            gaps = [dt.timedelta(minutes=rng.uniform(1, 15)) for _ in turns]
            span = sum(gaps, dt.timedelta())
            if s == "old":
                last = now - dt.timedelta(days=rng.uniform(10.5, 40))
            elif s == "normal":
                last = now - dt.timedelta(hours=rng.uniform(1, 6 * 24))
            else:
                last = now - dt.timedelta(hours=rng.uniform(1, 30 * 24))
            t = last - span
            th["times"] = []
            for g in gaps:
                t += g
                th["times"].append(t)
            threads.append(th)
    # Threads whose one turn's answer is a pending write (a parallel approval
    # interrupted the superstep), round robin over the users.
    for j in range(args.pending_writes):
        u = users[j % len(users)]
        zh = u["lang"] == "zh"
        order = f"P-{u['user_id']}{j:03d}"
        human = f"订单 {order} 请退款。" if zh else f"Please refund order {order}."
        answer = f"已为订单 {order} 申请退款，等待审批。" if zh else f"I have filed the refund for order {order}; it is waiting for approval."
        th = {"thread_id": ids.uuid(), "user_id": u["user_id"], "user_from": "metadata", "scenario": "pending_write",
              "detail": "interrupted_branch", "channel": "web", "lang": u["lang"], "topics": ["refund"],
              "turns": [{"human": human, "steps": [ai(ids, rng, answer)]}],
              "times": [now - dt.timedelta(hours=rng.uniform(1, 48))]}
        threads.append(th)
    # Threads of an app whose state has channels beyond messages.
    for j in range(args.custom_state):
        u = users[j % len(users)]
        zh = u["lang"] == "zh"
        human = "我的会员等级是什么？" if zh else "What is my membership tier?"
        tier = rng.choice(["gold", "silver", "bronze"])
        answer = f"您是{tier}会员。" if zh else f"You are a {tier} member."
        custom = {"name": u.get("name", "user " + u["user_id"]), "tier": tier,
                  "since": (now.date() - dt.timedelta(days=rng.randint(30, 900))).isoformat(),
                  "language": u["lang"], "contact": rng.sample(["email", "phone", "chat"], 2),
                  "last_seen": (now - dt.timedelta(hours=rng.uniform(1, 40))).isoformat(),
                  "tags": sorted(rng.sample(["vip", "refund", "late-delivery", "new"], 2)),
                  "notes": f"prefers {rng.choice(['morning', 'evening'])} calls", "doc_id": f"faq-{rng.randint(1, 99)}"}
        th = {"thread_id": ids.uuid(), "user_id": u["user_id"], "user_from": "metadata", "scenario": "custom_state",
              "detail": "profile", "channel": "app", "lang": u["lang"], "topics": ["profile"], "custom": custom,
              "turns": [{"human": human, "steps": [ai(ids, rng, answer)]}],
              "times": [now - dt.timedelta(hours=rng.uniform(1, 48))]}
        threads.append(th)
    return users, threads


# ---------------------------------------------------------------------------------------
# Running the plan.


def human_message(content: Any) -> HumanMessage:
    return HumanMessage(content=content)


def run_threads(apps: dict, threads: list[dict], durability: str, name: str) -> None:
    """Runs every turn of every thread in global time order under time_machine, so each
    checkpoint's ts and uuid6 id come from the simulated clock. (uuid6 never goes back
    in time within a process: ids are forced monotonic, so turns must run in order.)"""
    events = sorted(((t, i, k) for i, th in enumerate(threads) for k, t in enumerate(th["times"])), key=lambda e: e[0])
    started = time.monotonic()
    for n, (t, i, k) in enumerate(events):
        th = threads[i]
        app = app_of(apps, th)
        cfg = config_of(th)
        turn = th["turns"][k]
        with time_machine.travel(t, tick=True):
            if th["scenario"] == "zombie_no_reply" and th["detail"] == "update_state":
                app.update_state(cfg, {"messages": [human_message(turn["human"])]})
            elif th["scenario"] == "zombie_no_reply":
                app.invoke({"messages": [human_message(turn["human"])]}, cfg, durability=durability, interrupt_before=["agent"])
            else:
                try:
                    app.invoke({"messages": [human_message(turn["human"])]}, cfg, durability=durability)
                except ScriptedFailure:
                    if th["scenario"] != "zombie_error":
                        raise
        if n and n % 20000 == 0:
            print(f"{name}: {n}/{len(events)} turns, {time.monotonic() - started:.0f}s", file=sys.stderr)


def config_of(th: dict) -> dict:
    conf: dict[str, Any] = {"thread_id": th["thread_id"], "channel": th["channel"]}
    if th["user_from"] == "metadata":
        conf["user_id"] = th["user_id"]
    return {"configurable": conf}


def thread_truth(app, th: dict) -> dict:
    st = app.get_state({"configurable": {"thread_id": th["thread_id"]}})
    out = {k: th[k] for k in ("thread_id", "user_id", "user_from", "scenario", "lang", "channel", "topics")}
    out["detail"] = th.get("detail")
    out["marker"] = th.get("marker")
    out["turns"] = len(th["turns"])
    out["last_ts"] = st.created_at
    out["last_checkpoint_id"] = st.config["configurable"]["checkpoint_id"]
    out["step"] = st.metadata.get("step")
    out["source"] = st.metadata.get("source")
    out["metadata_user_id"] = st.metadata.get("user_id")
    out["next"] = list(st.next)
    out["errors"] = [task.error if isinstance(task.error, str) else repr(task.error) for task in st.tasks if task.error]
    out["messages"] = messages_to_dict(st.values.get("messages", []))
    # The channels beyond messages, as LangGraph's JSON reviver reads them.
    out["channels"] = {k: reviver_json(v) for k, v in sorted(st.values.items()) if k != "messages"}
    return out


def copy_checkpoints(src, dst, thread_id: str, task_paths: dict) -> int:
    """Puts every checkpoint and pending write of a thread into another saver, oldest
    first, through the saver API (this is how a saver migration is done)."""
    tuples = list(src.list({"configurable": {"thread_id": thread_id}}))
    tuples.reverse()
    for tup in tuples:
        ns = tup.config["configurable"].get("checkpoint_ns", "")
        parent = tup.parent_config or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        cp = tup.checkpoint
        saved = dst.put(parent, cp, tup.metadata, dict(cp["channel_versions"]))
        by_task: dict[str, list] = defaultdict(list)
        for task_id, channel, value in tup.pending_writes or []:
            by_task[task_id].append((channel, value))
        for task_id, writes in by_task.items():
            dst.put_writes(saved, writes, task_id, task_paths.get((thread_id, cp["id"], task_id), ""))
    return len(tuples)


# ---------------------------------------------------------------------------------------
# Stores and chat history.


def store_items(users: list[dict]) -> list[tuple[tuple, str, dict, float | None]]:
    items = []
    for u in users:
        uid = u["user_id"]
        items.append((("memories", uid), "coffee_preference", {"coffee": u["coffee"], "note": "咖啡偏好" if u["lang"] == "zh" else "coffee preference"}, None))
        items.append((("memories", uid), "address", dict(u["address"]), None))
        items.append((("memories", uid), "profile", {"lang": u["lang"], "vip": int(uid) % 3 == 0, "tags": ["coffee", "repeat-buyer"]}, None))
        if int(uid) % 4 == 0:
            # working notes that expire (ttl in minutes)
            items.append((("memories", uid, "scratch"), "last_session", {"open_order": u["order_id"], "summary": "waiting for stock"}, 60.0 * 24))
    items.append((("procedures", "customer-service"), "delivery", {"steps": ["confirm_address", "ask_delivery_time", "schedule_delivery"], "rule": "confirm the address before asking for a delivery time"}, None))
    items.append((("procedures", "customer-service"), "refund", {"steps": ["ask_photo", "refund_in_full"], "window_days": 7}, None))
    return items


def iso(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):  # SQLite keeps timestamps as text, in two formats
        v = dt.datetime.fromisoformat(v)
    if v.tzinfo is None:
        v = v.replace(tzinfo=UTC)
    return v.isoformat()


def write_store(store, items, table_rows) -> list[dict]:
    store.setup()
    for ns, key, value, ttl in items:
        store.put(ns, key, value, ttl=ttl)
    # update some items so updated_at differs from created_at
    for ns, key, value, ttl in items[::5]:
        value = dict(value)
        value["updated"] = True
        store.put(ns, key, value, ttl=ttl)
    out = []
    extra = table_rows()
    for ns, key, _, _ in items:
        it = store.get(ns, key, refresh_ttl=False)
        exp, ttl_min = extra[(".".join(ns), key)]
        out.append({
            "namespace": list(it.namespace), "key": it.key, "value": it.value,
            "created_at": iso(it.created_at), "updated_at": iso(it.updated_at),
            "expires_at": iso(exp), "ttl_minutes": ttl_min,
        })
    return out


def write_langchain(conn, table: str, users: list[dict], rng: random.Random, k: int) -> list[dict]:
    from langchain_core.messages import SystemMessage
    from langchain_postgres import PostgresChatMessageHistory

    PostgresChatMessageHistory.create_tables(conn, table)
    ids = Ids(rng)
    sessions = []
    for u in users[:k]:
        sid = ids.uuid()
        h = PostgresChatMessageHistory(table, sid, sync_connection=conn)
        zh = u["lang"] == "zh"
        call = tc(ids, "lookup_order", {"order_id": u["order_id"]})
        msgs = [
            SystemMessage(content="你是咖啡器具店的客服。" if zh else "You are the coffee-gear shop's support agent."),
            HumanMessage(content=f"订单 {u['order_id']} 发货了吗？" if zh else f"Has order {u['order_id']} shipped?"),
            AIMessage(content="", tool_calls=[call], id=ids.run()),
            ToolMessage(content=json.dumps({"order_id": u["order_id"], "status": "not_shipped"}), tool_call_id=call["id"], name="lookup_order"),
            AIMessage(content=blocks("还没有发货。" if zh else "Not yet: it is waiting for stock."), id=ids.run()),
        ]
        h.add_messages(msgs[:2])
        h.add_messages(msgs[2:])
        sessions.append({"session_id": sid, "user_id": u["user_id"], "messages": messages_to_dict(h.messages)})
    return sessions


# ---------------------------------------------------------------------------------------


def versions() -> dict:
    out = {}
    for p in ["langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres", "langgraph-checkpoint-sqlite", "langgraph-prebuilt", "langchain-core", "langchain-postgres", "psycopg", "ormsgpack", "time-machine"]:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


@contextlib.contextmanager
def open_saver(args, which: str):
    """The PostgresSaver or SqliteSaver the arguments name, on a connection of its own."""
    if which == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(args.postgres_dsn) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(args.sqlite, check_same_thread=False)
    try:
        conn.execute("PRAGMA synchronous=OFF")  # a fixture: no fsync per put
        yield SqliteSaver(conn)
    finally:
        conn.close()


def run_partition(args, primary: str, threads: list[dict], worker: int) -> list[dict]:
    """Runs the threads on the primary saver and returns LangGraph's view of them."""
    with open_saver(args, primary) as saver:
        apps = compile_apps(saver)
        run_threads(apps, threads, args.durability, f"worker {worker}")
        truth = []
        for th in threads:
            tt = thread_truth(app_of(apps, th), th)
            if args.no_messages:
                tt["message_count"] = len(tt.pop("messages"))
            truth.append(tt)
        return truth


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--postgres-dsn")
    ap.add_argument("--sqlite")
    ap.add_argument("--langchain-table")
    ap.add_argument("--langchain-sessions", type=int, default=10)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--threads-per-user", type=int, default=4)
    ap.add_argument("--turns", default="2-4", help="user turns per kept thread, MIN-MAX")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--durability", choices=["sync", "async", "exit"], default="async",
                    help="LangGraph durability: async/sync keep a checkpoint per step, exit one per turn (faster, for bulk runs)")
    ap.add_argument("--workers", type=int, default=1,
                    help="processes running threads in parallel on PostgreSQL (users are split between them)")
    ap.add_argument("--no-messages", action="store_true", help="leave the messages out of expected.json (large runs)")
    ap.add_argument("--custom-state", type=int, default=0,
                    help="also this many threads of an app with state channels beyond messages (a Pydantic model, a dataclass, a datetime, a set)")
    ap.add_argument("--pending-writes", type=int, default=0,
                    help="also this many threads whose answer is a pending write (a parallel branch interrupted the superstep)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not args.postgres_dsn and not args.sqlite:
        ap.error("give --postgres-dsn and/or --sqlite")
    if args.langchain_table and not args.postgres_dsn:
        ap.error("--langchain-table needs --postgres-dsn")
    if args.workers > 1 and not args.postgres_dsn:
        ap.error("--workers needs --postgres-dsn (SQLite takes one writer)")

    t0 = time.monotonic()
    rng = random.Random(args.seed)
    now = dt.datetime.now(UTC) - dt.timedelta(minutes=5)
    users, threads = make_plan(args, rng, now)
    for th in threads:
        PLANS[th["thread_id"]] = th
    timings: dict[str, float] = {}
    expected: dict[str, Any] = {
        "seed": args.seed,
        "options": {"users": args.users, "threads_per_user": args.threads_per_user, "turns": args.turns, "durability": args.durability},
        "versions": versions(),
        "users": users,
    }
    primary = "postgres" if args.postgres_dsn else "sqlite"
    for which in ("postgres", "sqlite"):
        if getattr(args, "postgres_dsn" if which == "postgres" else "sqlite"):
            with open_saver(args, which) as saver:
                saver.setup()

    # Run the threads: the plan's globals are inherited by forked workers, each with its
    # own connection and its own part of the users.
    if args.workers <= 1:
        truth = run_partition(args, primary, threads, 0)
    else:
        parts: list[list[dict]] = [[] for _ in range(args.workers)]
        for th in threads:
            parts[int(th["user_id"]) % args.workers].append(th)
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=ctx) as ex:
            results = list(ex.map(run_partition, [args] * args.workers, [primary] * args.workers, parts, range(args.workers)))
        by_id = {tt["thread_id"]: tt for part in results for tt in part}
        truth = [by_id[th["thread_id"]] for th in threads]
    timings["run"] = time.monotonic() - t0

    with contextlib.ExitStack() as stack:
        pg_saver = stack.enter_context(open_saver(args, "postgres")) if args.postgres_dsn else None
        sqlite_saver = stack.enter_context(open_saver(args, "sqlite")) if args.sqlite else None
        add_checkpoint_counts(truth, pg_saver, sqlite_saver)
        if pg_saver and sqlite_saver:
            t2 = time.monotonic()
            task_paths = {}
            with pg_saver.conn.cursor() as cur:
                cur.execute("SELECT thread_id, checkpoint_id, task_id, task_path FROM checkpoint_writes WHERE task_path <> ''")
                for r in cur.fetchall():
                    task_paths[(r["thread_id"], r["checkpoint_id"], r["task_id"])] = r["task_path"]
            for th in threads:
                copy_checkpoints(pg_saver, sqlite_saver, th["thread_id"], task_paths)
            sapps = compile_apps(sqlite_saver)
            for tt in truth:
                st = app_of(sapps, tt).get_state({"configurable": {"thread_id": tt["thread_id"]}})
                same = st.created_at == tt["last_ts"] and st.config["configurable"]["checkpoint_id"] == tt["last_checkpoint_id"]
                if args.no_messages:
                    same = same and len(st.values.get("messages", [])) == tt["message_count"]
                else:
                    same = same and messages_to_dict(st.values.get("messages", [])) == tt["messages"]
                if not same:
                    raise SystemExit(f"SQLite copy of {tt['thread_id']} differs from PostgreSQL")
            timings["sqlite_copy"] = time.monotonic() - t2
    expected["threads"] = truth

    t3 = time.monotonic()
    items = store_items(users)
    if args.postgres_dsn:
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(args.postgres_dsn) as store:
            def pg_rows():
                with store.conn.cursor() as cur:
                    cur.execute("SELECT prefix, key, expires_at, ttl_minutes FROM store")
                    return {(r["prefix"], r["key"]): (r["expires_at"], r["ttl_minutes"]) for r in cur.fetchall()}
            expected["store"] = write_store(store, items, pg_rows)
    if args.sqlite:
        from langgraph.store.sqlite import SqliteStore

        with contextlib.closing(sqlite3.connect(args.sqlite, check_same_thread=False, isolation_level=None)) as stconn:
            store = SqliteStore(stconn)

            def sq_rows():
                cur = stconn.execute("SELECT prefix, key, expires_at, ttl_minutes FROM store")
                return {(r[0], r[1]): (r[2], r[3]) for r in cur.fetchall()}
            expected["sqlite_store"] = write_store(store, items, sq_rows)
        # Fold the WAL into the database file, so the file alone is the whole database.
        with contextlib.closing(sqlite3.connect(args.sqlite)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    timings["store"] = time.monotonic() - t3

    if args.langchain_table:
        import psycopg

        with psycopg.connect(args.postgres_dsn, autocommit=True) as conn:
            sessions = write_langchain(conn, args.langchain_table, users, random.Random(args.seed + 1), args.langchain_sessions)
            expected["langchain"] = {"table": args.langchain_table, "sessions": sessions}

    counts: dict[str, int] = defaultdict(int)
    for tt in expected["threads"]:
        counts["threads"] += 1
        counts[tt["scenario"]] += 1
        counts["from_" + tt["user_from"]] += 1
        counts["messages"] += tt.get("message_count", len(tt.get("messages", [])))
        counts["checkpoints"] += tt["checkpoints"]
    expected["counts"] = dict(counts)
    timings["total"] = time.monotonic() - t0
    expected["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, indent=1, default=iso)
    print(json.dumps({"counts": expected["counts"], "timings_s": expected["timings_s"]}), file=sys.stderr)
    return 0


def add_checkpoint_counts(truth: list[dict], pg_saver, sqlite_saver) -> None:
    """The number of root checkpoints of each thread and the ts of its first one."""
    if pg_saver is not None:
        with pg_saver.conn.cursor() as cur:
            cur.execute(
                "SELECT DISTINCT ON (thread_id) thread_id, checkpoint->>'ts' AS ts, count(*) OVER (PARTITION BY thread_id) AS n"
                " FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id, checkpoint_id")
            rows = {r["thread_id"]: (r["ts"], r["n"]) for r in cur.fetchall()}
    else:
        rows = {}
        for tt in truth:
            tups = list(sqlite_saver.list({"configurable": {"thread_id": tt["thread_id"]}}))
            rows[tt["thread_id"]] = (tups[-1].checkpoint["ts"], len(tups))
    for tt in truth:
        tt["first_ts"], tt["checkpoints"] = rows[tt["thread_id"]]


if __name__ == "__main__":
    sys.exit(main())
