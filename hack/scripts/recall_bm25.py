"""BM25 baseline of the recall benchmark (hack/bench, section recall).

Ranks each question's scope with rank_bm25's BM25Okapi, an implementation independent
of the gateway's. Words are lower-cased runs of letters and digits; Chinese (and any
CJK) runs become overlapping character bigrams, since Chinese has no spaces (a single
character stays a unigram).

    python recall_bm25.py CORPUS.json OUT.json [DEPTH]

CORPUS.json is the corpus the bench wrote (turns and questions); OUT.json gets
{"rankings": {question id: [turn id, ...]}}, best first, at most DEPTH (100) turns with
a positive score.
"""
import json
import re
import sys
from collections import defaultdict

from rank_bm25 import BM25Okapi

CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
TOKEN = re.compile(f"[{CJK}]+|[^\\W_{CJK}]+")
IS_CJK = re.compile(f"[{CJK}]")


def tokenize(text):
    out = []
    for m in TOKEN.finditer(text.lower()):
        w = m.group()
        if IS_CJK.match(w):
            out.extend([w] if len(w) == 1 else [w[i:i + 2] for i in range(len(w) - 1)])
        else:
            out.append(w)
    return out


def main():
    corpus_path, out_path = sys.argv[1], sys.argv[2]
    depth = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    by_scope = defaultdict(list)
    for t in corpus["turns"]:
        by_scope[t["scope"]].append(t)
    indexes = {}
    for scope, turns in by_scope.items():
        indexes[scope] = (BM25Okapi([tokenize(t["text"]) for t in turns]), [t["id"] for t in turns])
    rankings = {}
    for q in corpus["questions"]:
        bm25, ids = indexes[q["scope"]]
        tokens = tokenize(q["query"])
        if not tokens:
            rankings[q["id"]] = []
            continue
        scores = bm25.get_scores(tokens)
        order = sorted(range(len(ids)), key=lambda i: (-scores[i], i))
        rankings[q["id"]] = [ids[i] for i in order[:depth] if scores[i] > 0]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"rankings": rankings}, f)


if __name__ == "__main__":
    main()
