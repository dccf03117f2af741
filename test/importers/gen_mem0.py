#!/usr/bin/env python3
"""Writes real mem0 data for the importer tests, and its ground truth.

mem0ai's own Memory, configured as a local app configures it: its vector store is
Chroma in a local directory (--path/chroma) and its history a SQLite file
(--path/history.db). Nothing reaches a network: memories are added with infer=False
(each message stored as it is, no LLM), embedded by a deterministic local embedder
(a hash of the text: the importer re-embeds anyway), and telemetry is off.

Scenarios, all decided by --seed: users (one of them "zoë-ユーザー") with memories of
several categories, some also tagged with an agent and a run; memories of an agent
alone and of a run alone; ~20% updated once or twice (mem0's history keeps the old
text), ~10% deleted (history ends in DELETE); assistant messages beside the user's.

--out writes expected.json: what mem0 itself reports: every memory get() returns
(text, ids, metadata, times), its history(), and the ids that were deleted.
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

os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("OPENAI_API_KEY", "not-used")  # no LLM is called with infer=False

from mem0 import Memory  # noqa: E402
from mem0.embeddings.base import EmbeddingBase  # noqa: E402

DIM = 32


class HashEmbedder(EmbeddingBase):
    """A deterministic local embedder: mem0 needs vectors, the importer does not."""

    def embed(self, text, memory_action=None):
        h = hashlib.sha256(text.encode()).digest()
        v = [(h[i % 32] / 255.0) - 0.5 for i in range(DIM)]
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v]


FACTS_EN = ["prefers {t} coffee", "lives in {c}", "orders arrive on {d}", "allergic to {a}", "pays with {p}"]
FACTS_ZH = ["喜欢{t}咖啡", "住在{c}", "订单在{d}送达", "对{a}过敏", "用{p}付款"]
TEMPS = ["hot", "iced", "warm"]
CITIES = ["Lisbon", "Porto", "Berlin", "北京", "上海"]
DAYS = ["Monday", "Friday", "weekends"]
ALLERGENS = ["peanuts", "gluten", "shellfish"]
PAYS = ["card", "invoice", "wallet"]
CATEGORIES = ["preferences", "personal", "orders", "health", "billing"]


def fact(rng: random.Random, zh: bool, k: int) -> str:
    tmpl = (FACTS_ZH if zh else FACTS_EN)[k % 5]
    return tmpl.format(t=rng.choice(TEMPS), c=rng.choice(CITIES), d=rng.choice(DAYS), a=rng.choice(ALLERGENS), p=rng.choice(PAYS))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True, help="directory for chroma/ and history.db")
    ap.add_argument("--users", type=int, default=12)
    ap.add_argument("--memories-per-user", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-truth", action="store_true", help="leave the memories out of expected.json (large runs)")
    ap.add_argument("--out")
    args = ap.parse_args()

    t0 = time.monotonic()
    rng = random.Random(args.seed)
    cfg = {
        "vector_store": {"provider": "chroma", "config": {"collection_name": "mem0", "path": os.path.join(args.path, "chroma")}},
        "history_db_path": os.path.join(args.path, "history.db"),
        "embedder": {"provider": "openai", "config": {"embedding_dims": DIM, "api_key": "not-used"}},
        "llm": {"provider": "openai", "config": {"api_key": "not-used"}},
    }
    m = Memory.from_config(cfg)
    m.embedding_model = HashEmbedder()

    users = ["zoë-ユーザー"] + [f"{1000 + i}" for i in range(args.users - 1)]
    added: list[str] = []
    for u in users:
        zh = rng.random() < 0.3 or not u.isdigit()
        for k in range(args.memories_per_user):
            kw = {"user_id": u}
            r = rng.random()
            if r < 0.3:
                kw["agent_id"] = "support"
            if r < 0.15:
                kw["run_id"] = f"run-{u}-{k // 3}"
            msgs = [{"role": "user", "content": fact(rng, zh, k)}]
            if rng.random() < 0.25:
                msgs.append({"role": "assistant", "content": "记下了" if zh else "Noted, thank you."})
            meta = {"category": CATEGORIES[k % 5]}
            if rng.random() < 0.3:
                meta["confidence"] = round(rng.uniform(0.5, 1.0), 2)
            if rng.random() < 0.2:
                meta["tags"] = rng.sample(["vip", "eu", "mobile", "beta"], 2)  # Chroma keeps lists apart
            res = m.add(msgs, metadata=meta, infer=False, **kw)
            added += [x["id"] for x in res["results"]]
    # Memories of an agent alone, and of a run alone.
    for k in range(3):
        res = m.add([{"role": "user", "content": f"escalate refunds over {100 * (k + 1)} EUR to a human"}], agent_id="support",
                    metadata={"category": "procedure"}, infer=False)
        added += [x["id"] for x in res["results"]]
    res = m.add([{"role": "user", "content": "this session is about order A-17"}], run_id="run-anonymous", infer=False)
    added += [x["id"] for x in res["results"]]

    updated, deleted = [], []
    for mid in added:
        r = rng.random()
        if r < 0.1:
            m.delete(mid)
            deleted.append(mid)
        elif r < 0.3:
            cur = m.get(mid)["memory"]
            for n in range(1 + (rng.random() < 0.3)):
                cur = f"{cur} (update {n + 1})"
                m.update(mid, cur)
            updated.append(mid)

    expected: dict = {"seed": args.seed, "users": users, "deleted": deleted, "updated": updated,
                      "counts": {"added": len(added), "deleted": len(deleted), "updated": len(updated)}}
    if not args.no_truth:
        mems = {}
        for mid in added:
            got = m.get(mid)
            if got is None:
                continue
            got["history"] = m.history(mid)
            mems[mid] = got
        expected["memories"] = mems
    expected["timings_s"] = {"total": round(time.monotonic() - t0, 3)}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, indent=1, default=str)
    print(json.dumps({"counts": expected["counts"], "timings_s": expected["timings_s"]}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
