#!/usr/bin/env python3
"""Writes real CrewAI memory for the importer tests, and its ground truth.

crewai 1.9 (the last release of its "legacy" memory, crewai 0.x to 1.9): crews with
memory=True run their tasks, and crewai itself writes what they remember into its
storage directory (CREWAI_STORAGE_DIR, here --path):

  long_term_memory_storage.db  long-term memory: one row per task an agent completed,
                               with the evaluator's suggestions and quality score
  chroma.sqlite3 (+ segments)  short-term memory (memory_short_term_<roles>: the agents'
                               final answers) and entity memory (memory_entities_<roles>)

No model is called: each agent's LLM is a scripted crewai BaseLLM that answers the task
and, asked to evaluate it, returns the TaskEvaluation JSON (suggestions, quality,
entities); embeddings come from a deterministic local function (the importer
re-embeds anyway). Telemetry and tracing are off.

Scenarios, all decided by --seed: several crews (one whose agent role is Unicode, one
with two agents, one role holding '/' and '.'), each kicked off --runs times (the same
task again gives the long-term memory a second row, the same entity an updated
description); a "knowledge" collection that is not memory.

--out writes expected.json: what crewai itself holds afterwards: the long-term rows
(LTMSQLiteStorage.load per task), and every document of each memory collection as
chromadb's get() returns it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True, help="crewai's storage directory (CREWAI_STORAGE_DIR)")
    ap.add_argument("--crews", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2, help="kickoffs per crew")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bulk-crews", type=int, default=0,
                    help="benchmark data instead: this many one-agent crews whose memories crewai's own memory classes "
                         "save directly (no kickoff), --bulk-tasks tasks each: a long-term row, a short-term record and an entity")
    ap.add_argument("--bulk-tasks", type=int, default=100)
    ap.add_argument("--no-truth", action="store_true", help="leave the records out of expected.json (large runs)")
    ap.add_argument("--out")
    args = ap.parse_args()

    os.makedirs(args.path, exist_ok=True)
    os.environ["CREWAI_STORAGE_DIR"] = os.path.abspath(args.path)
    for k, v in {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_DISABLE_TRACKING": "true", "OTEL_SDK_DISABLED": "true",
                 "CREWAI_TRACING_ENABLED": "false", "ANONYMIZED_TELEMETRY": "False", "OPENAI_API_KEY": "not-used"}.items():
        os.environ[k] = v

    # crewai reads its storage directory when imported.
    import chromadb  # noqa: E402
    from chromadb.api.types import EmbeddingFunction as ChromaEmbeddingFunction  # noqa: E402
    from crewai import Agent, Crew, Task  # noqa: E402
    from crewai.llms.base_llm import BaseLLM  # noqa: E402
    from crewai.memory.storage.ltm_sqlite_storage import LTMSQLiteStorage  # noqa: E402
    from crewai.rag.chromadb.config import ChromaDBConfig  # noqa: E402
    from crewai.rag.embeddings.providers.custom.embedding_callable import CustomEmbeddingFunction  # noqa: E402

    class HashEmbedding(CustomEmbeddingFunction, ChromaEmbeddingFunction):
        """A deterministic local embedder: crewai needs vectors, the importer does not."""

        def __call__(self, input):  # noqa: A002 (chromadb's name)
            out = []
            for text in input:
                h = hashlib.sha256(text.encode()).digest()
                v = [(h[i % 32] / 255.0) - 0.5 for i in range(32)]
                n = math.sqrt(sum(x * x for x in v)) or 1.0
                out.append([x / n for x in v])
            return out

    class ScriptedLLM(BaseLLM):
        """Answers each task with its script's line, and the evaluator with TaskEvaluation JSON."""

        answer: str = ""
        evaluation: str = "{}"

        def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None, from_agent=None,
                 response_model=None):
            text = messages if isinstance(messages, str) else json.dumps(messages, ensure_ascii=False)
            if "Assess the quality" in text:
                return self.evaluation
            return "Thought: I know what to do\nFinal Answer: " + self.answer

        def supports_function_calling(self) -> bool:
            return False

        def supports_stop_words(self) -> bool:
            return False

        def get_context_window_size(self) -> int:
            return 8192

    rng = random.Random(args.seed)
    t0 = time.monotonic()
    if args.bulk_crews:
        from crewai.memory.entity.entity_memory_item import EntityMemoryItem  # noqa: E402
        from crewai.memory.long_term.long_term_memory_item import LongTermMemoryItem  # noqa: E402

        for ci in range(args.bulk_crews):
            a = Agent(role=f"Planner {ci}", goal="plan trips", backstory="a careful planner", llm=ScriptedLLM(model="scripted"), verbose=False)
            crew = Crew(agents=[a], tasks=[Task(description="plan", expected_output="a plan", agent=a)], memory=True, verbose=False,
                        embedder={"provider": "custom", "config": {"embedding_callable": HashEmbedding}})
            for ti in range(args.bulk_tasks):
                city = rng.choice(["Lisbon", "Porto", "Berlin", "北京", "上海"])
                desc = f"Plan day {ti} in {city} for customer {ci * args.bulk_tasks + ti}"
                crew._long_term_memory.save(LongTermMemoryItem(agent=a.role, task=desc, expected_output="an itinerary",
                                                               datetime=str(time.time()), quality=7.5,
                                                               metadata={"suggestions": [f"check the weather in {city}"], "quality": 7.5}))
                crew._short_term_memory.save(value=f"Take the {8 + ti % 4}:00 train to {city}; lunch near the river ({ti}).",
                                             metadata={"observation": desc})
                crew._entity_memory.save(EntityMemoryItem(name=f"customer {ci * args.bulk_tasks + ti}", type="person",
                                                          description=f"travels to {city}", relationships="- books trips"))
        expected = {"seed": args.seed, "bulk": {"crews": args.bulk_crews, "tasks": args.bulk_tasks},
                    "timings_s": {"total": round(time.monotonic() - t0, 3)}}
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(expected, f)
        print(json.dumps(expected), file=sys.stderr)
        return 0
    crews = [
        {"roles": ["Travel Planner"], "city": "Lisbon"},
        {"roles": ["旅行规划师"], "city": "上海"},
        {"roles": ["Researcher", "Writer"], "city": "Porto"},
        {"roles": ["Ops/Support v2.1"], "city": "Berlin"},
    ]
    while len(crews) < args.crews:
        crews.append({"roles": [f"Agent {len(crews)}"], "city": rng.choice(["Lisbon", "Porto", "Berlin", "北京"])})
    crews = crews[: args.crews]

    tasks_seen: list[str] = []
    for ci, c in enumerate(crews):
        for run in range(args.runs):
            agents, tasks = [], []
            for ri, role in enumerate(c["roles"]):
                llm = ScriptedLLM(model="scripted")
                quality = round(rng.uniform(4, 10), 1)
                desc = f"Plan a day in {c['city']} for customer {1000 + ci} (step {ri + 1})"
                llm.answer = f"Take the {8 + run}:00 train to {c['city']}; lunch at café {rng.choice(['Luar', 'Azul', '老街'])}."
                llm.evaluation = json.dumps({
                    "suggestions": [f"check the weather in {c['city']}", f"run {run + 1}: book earlier"],
                    "quality": quality,
                    "entities": [
                        {"name": c["city"], "type": "city", "description": f"destination, visit {run + 1}",
                         "relationships": ["customer travels to", f"{role} plans"]},
                        {"name": f"customer {1000 + ci}", "type": "person", "description": "the traveller",
                         "relationships": [f"travels to {c['city']}"]},
                    ],
                }, ensure_ascii=False)
                a = Agent(role=role, goal="plan trips", backstory="a careful planner", llm=llm, verbose=False)
                agents.append(a)
                tasks.append(Task(description=desc, expected_output="an itinerary", agent=a))
                tasks_seen.append(desc)
            crew = Crew(agents=agents, tasks=tasks, memory=True, verbose=False,
                        embedder={"provider": "custom", "config": {"embedding_callable": HashEmbedding}})
            crew.kickoff()

    # A knowledge collection in the same Chroma database: not memory, counted as left out.
    # With crewai's own client settings: Chroma refuses a second client of other settings.
    client = chromadb.PersistentClient(path=os.environ["CREWAI_STORAGE_DIR"], settings=ChromaDBConfig().settings)
    kc = client.get_or_create_collection("knowledge_travel_guide", embedding_function=None)
    kc.add(ids=["k1", "k2"], documents=["Lisbon has seven hills", "Porto is on the Douro"],
           embeddings=HashEmbedding()(["Lisbon has seven hills", "Porto is on the Douro"]))

    expected: dict = {"seed": args.seed, "crews": crews}
    ltm = LTMSQLiteStorage(db_path=os.path.join(args.path, "long_term_memory_storage.db"), verbose=True)
    expected["long_term"] = {t: ltm.load(t, 1000) for t in dict.fromkeys(tasks_seen)}
    cols = {}
    for col in client.list_collections():
        name = col if isinstance(col, str) else col.name
        got = client.get_collection(name).get(include=["documents", "metadatas"])
        cols[name] = [{"id": i, "document": d, "metadata": m} for i, d, m in zip(got["ids"], got["documents"], got["metadatas"])]
    expected["collections"] = cols
    expected["timings_s"] = {"total": round(time.monotonic() - t0, 3)}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, indent=1, default=str)
    print(json.dumps({"collections": {k: len(v) for k, v in cols.items()}, "timings_s": expected["timings_s"]}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
