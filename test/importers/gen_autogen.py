#!/usr/bin/env python3
"""Writes real AutoGen state for the importer tests, and its ground truth.

autogen-agentchat's own agents and teams, run offline: the model is autogen-ext's
ReplayChatCompletionClient (scripted answers, function calls among them: no LLM), the
tools real Python functions the AssistantAgent calls. Per conversation it writes
(--path):

  team-<n>.json   RoundRobinGroupChat.save_state() of a team of one support agent
                  with a ListMemory (so its thread holds MemoryQueryEvents too)
  agent-<n>.json  the agent's own save_state() (its model context)
  memory.json     the ListMemory's dump_component()

--out writes expected.json: each team's message thread as save_state() has it, and
each agent's model context, as the files hold them (what an import must read).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.memory import ListMemory, MemoryContent, MemoryMimeType
from autogen_core.models import CreateResult, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown", "structured_output": False}
ORDERS = {}


def lookup_order(order_id: str) -> str:
    """Looks an order up: its status and when it arrives."""
    return json.dumps(ORDERS.get(order_id, {"status": "unknown"}))


def call(i: int, order: str) -> CreateResult:
    return CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=1, completion_tokens=1),
                        content=[FunctionCall(id=f"call_{i}", name="lookup_order", arguments=json.dumps({"order_id": order}))])


async def conversation(n: int, memory: ListMemory, path: str) -> dict:
    order = f"A-{10 + n}"
    ORDERS[order] = {"status": "shipped", "eta": "Friday" if n % 2 else "Monday"}
    client = ReplayChatCompletionClient([call(n, order), f"Order {order} arrives on {ORDERS[order]['eta']}.",
                                         "Glad to help. TERMINATE"], model_info=MODEL_INFO)
    agent = AssistantAgent("support", model_client=client, tools=[lookup_order], memory=[memory], reflect_on_tool_use=True)
    team = RoundRobinGroupChat([agent], termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(8))
    task = f"订单 {order} 什么时候到？" if n % 3 == 2 else f"When does order {order} arrive?"
    await team.run(task=task)
    state = await team.save_state()
    with open(os.path.join(path, f"team-{n}.json"), "w", encoding="utf-8") as f:
        json.dump(state, f, ensure_ascii=False, indent=1, default=str)
    agent_state = await agent.save_state()
    with open(os.path.join(path, f"agent-{n}.json"), "w", encoding="utf-8") as f:
        json.dump(agent_state, f, ensure_ascii=False, indent=1, default=str)
    thread = next(s for s in state["agent_states"].values() if "message_thread" in s)["message_thread"]
    return {"thread": thread, "context": agent_state["llm_context"]["messages"]}


async def run(args) -> dict:
    os.makedirs(args.path, exist_ok=True)
    memory = ListMemory(name="support_prefs")
    await memory.add(MemoryContent(content="Customers prefer delivery windows in the morning", mime_type=MemoryMimeType.TEXT,
                                   metadata={"category": "preferences"}))
    await memory.add(MemoryContent(content={"escalate_over_eur": 100}, mime_type=MemoryMimeType.JSON))
    await memory.add(MemoryContent(content="# Refunds\nRefund within 14 days.", mime_type=MemoryMimeType.MARKDOWN))
    out = {"conversations": {}}
    for n in range(args.conversations):
        out["conversations"][str(n)] = await conversation(n, memory, args.path)
    dump = memory.dump_component().model_dump(mode="json")
    with open(os.path.join(args.path, "memory.json"), "w", encoding="utf-8") as f:
        json.dump(dump, f, ensure_ascii=False, indent=1)
    out["memory"] = dump["config"]["memory_contents"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True)
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--out")
    args = ap.parse_args()
    t0 = time.monotonic()
    expected = asyncio.run(run(args))
    expected["timings_s"] = {"total": round(time.monotonic() - t0, 3)}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, indent=1, default=str)
    print(json.dumps({"conversations": args.conversations, "timings_s": expected["timings_s"]}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
