#!/usr/bin/env python3
"""Writes seed 000's check-table memories (section 4.4) into one framework's own storage.

The fidelity test (test/clients, TestImportFidelitySeed000EachSource) asks seed 000's
questions of a store imported from each framework: the memories must have gone in the
way that framework keeps them, written by the framework itself. --memories is a JSON
file {"<user>": ["text", ...], ...} (the test writes it from hack/recallcorpus); each
user's texts are told the way the framework's users tell them:

  mem0        Memory.add(infer=False) per text with user_id=<user> (Chroma + history.db)
  llamaindex  one SimpleChatStore session per user, key "u-<user>:seed": each text a user
              message answered by the assistant (chat_store.json)
  autogen     one ListMemory per user, named <user>, each text a MemoryContent
              (memory-<user>.json, dump_component())
  crewai      one crew per user, its agent's role <user>: each text saved by the crew's
              short-term memory, the way an agent's answer is (the storage directory)

Run with that framework's venv (bin/frameworks-venv/NAME). No model is called:
embeddings, where the framework needs them, come from a local hash (the import
re-embeds with the target's model).
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import sys

DIM = 32


def hash_vector(text: str) -> list[float]:
    h = hashlib.sha256(text.encode()).digest()
    v = [(h[i % 32] / 255.0) - 0.5 for i in range(DIM)]
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


def write_mem0(path: str, memories: dict) -> None:
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("OPENAI_API_KEY", "not-used")
    from mem0 import Memory
    from mem0.embeddings.base import EmbeddingBase

    class HashEmbedder(EmbeddingBase):
        def embed(self, text, memory_action=None):
            return hash_vector(text)

    m = Memory.from_config({
        "vector_store": {"provider": "chroma", "config": {"collection_name": "mem0", "path": os.path.join(path, "chroma")}},
        "history_db_path": os.path.join(path, "history.db"),
        "embedder": {"provider": "openai", "config": {"embedding_dims": DIM, "api_key": "not-used"}},
        "llm": {"provider": "openai", "config": {"api_key": "not-used"}},
    })
    m.embedding_model = HashEmbedder()
    for user, texts in memories.items():
        for text in texts:
            m.add([{"role": "user", "content": text}], user_id=user, infer=False)


def write_llamaindex(path: str, memories: dict) -> None:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.storage.chat_store import SimpleChatStore

    cs = SimpleChatStore()
    for user, texts in memories.items():
        key = f"u-{user}:seed"
        for text in texts:
            cs.add_message(key, ChatMessage(role=MessageRole.USER, content=text))
            cs.add_message(key, ChatMessage(role=MessageRole.ASSISTANT, content="好的，记下了。"))
    cs.persist(os.path.join(path, "chat_store.json"))


def write_autogen(path: str, memories: dict) -> None:
    from autogen_core.memory import ListMemory, MemoryContent, MemoryMimeType

    async def run() -> None:
        for user, texts in memories.items():
            mem = ListMemory(name=user)
            for text in texts:
                await mem.add(MemoryContent(content=text, mime_type=MemoryMimeType.TEXT))
            with open(os.path.join(path, f"memory-{user}.json"), "w", encoding="utf-8") as f:
                json.dump(mem.dump_component().model_dump(mode="json"), f, ensure_ascii=False)

    asyncio.run(run())


def write_crewai(path: str, memories: dict) -> None:
    os.environ["CREWAI_STORAGE_DIR"] = os.path.abspath(path)
    for k, v in {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_DISABLE_TRACKING": "true", "OTEL_SDK_DISABLED": "true",
                 "CREWAI_TRACING_ENABLED": "false", "OPENAI_API_KEY": "not-used"}.items():
        os.environ[k] = v
    from chromadb.api.types import EmbeddingFunction as ChromaEmbeddingFunction
    from crewai import Agent, Crew, Task
    from crewai.llms.base_llm import BaseLLM
    from crewai.rag.embeddings.providers.custom.embedding_callable import CustomEmbeddingFunction

    class HashEmbedding(CustomEmbeddingFunction, ChromaEmbeddingFunction):
        def __call__(self, input):  # noqa: A002 (chromadb's name)
            return [hash_vector(t) for t in input]

    class NoLLM(BaseLLM):
        def call(self, *args, **kwargs):
            raise RuntimeError("no model is called")

    for user, texts in memories.items():
        a = Agent(role=user, goal="serve the customer", backstory="customer service", llm=NoLLM(model="none"), verbose=False)
        crew = Crew(agents=[a], tasks=[Task(description="serve", expected_output="an answer", agent=a)], memory=True, verbose=False,
                    embedder={"provider": "custom", "config": {"embedding_callable": HashEmbedding}})
        for i, text in enumerate(texts):
            crew._short_term_memory.save(value=text, metadata={"observation": f"conversation with {user}, note {i + 1}"})


WRITERS = {"mem0": write_mem0, "llamaindex": write_llamaindex, "autogen": write_autogen, "crewai": write_crewai}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True)
    ap.add_argument("--framework", required=True, choices=sorted(WRITERS))
    ap.add_argument("--memories", required=True, help='JSON file {"<user>": ["text", ...]}')
    ap.add_argument("--out")
    args = ap.parse_args()
    os.makedirs(args.path, exist_ok=True)
    with open(args.memories, encoding="utf-8") as f:
        memories = json.load(f)
    WRITERS[args.framework](args.path, memories)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"framework": args.framework, "users": sorted(memories)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
