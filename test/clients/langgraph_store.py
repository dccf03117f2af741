"""The langgraph_sdk store client, unchanged, against the gateway's LangGraph Store API.

Input (stdin, JSON): url, u1 (a key for user:u1), u2 (a key for user:u2), admin (a
key for user:*). Prints the report (see report.py).
"""
from datetime import datetime

from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError, NotFoundError

from report import check, data, expect, read_input, run

PREFS = {
    "coffee": "hot",
    "sugar": False,
    "shots": 2,
    "ratio": 0.75,
    "note": "不要冰的，热的就好",
    "tags": ["morning", "office"],
    "cup": {"size": "large", "lid": True},
}
PROFILE = {"name": "Ada", "city": "Lisbon", "kind": "profile"}
ORDER = {"order": "A1024", "status": "not shipped", "kind": "event"}


def parses_as_time(s):
    try:
        datetime.fromisoformat(s.replace("Z", "+00:00"))
        return True
    except (TypeError, ValueError):
        return False


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


async def status_of(coro):
    """The HTTP status the SDK raised for coro, or 'no error' (with the result)."""
    try:
        res = await coro
    except APIStatusError as e:
        return e.status_code
    return ("no error", res)


async def main():
    inp = read_input()
    u1 = get_client(url=inp["url"], api_key=inp["u1"])
    u2 = get_client(url=inp["url"], api_key=inp["u2"])
    admin = get_client(url=inp["url"], api_key=inp["admin"])

    # put_item into ("memories","u1") and ("memories","u1","prefs"); the SDK returns None.
    expect("put_item returns None", await u1.store.put_item(("memories", "u1"), key="profile", value=PROFILE), None)
    await u1.store.put_item(["memories", "u1", "prefs"], key="coffee", value=PREFS, index=False)
    await u1.store.put_item(["memories", "u1"], key="order-a1024", value=ORDER, ttl=60)
    await u2.store.put_item(["memories", "u2"], key="profile", value={"name": "Bo", "city": "Porto", "kind": "profile"})

    # get_item: the exact namespace, key and value back.
    item = await u1.store.get_item(["memories", "u1", "prefs"], key="coffee")
    expect("get_item namespace", item.get("namespace"), ["memories", "u1", "prefs"])
    expect("get_item key", item.get("key"), "coffee")
    expect("get_item value (round trip)", item.get("value"), PREFS)
    check("get_item created_at is ISO 8601", parses_as_time(item.get("created_at")), item.get("created_at"), "an ISO 8601 time")
    check("get_item updated_at is ISO 8601", parses_as_time(item.get("updated_at")), item.get("updated_at"), "an ISO 8601 time")
    prof = await u1.store.get_item(("memories", "u1"), key="profile")
    expect("get_item at depth 2", (prof.get("namespace"), prof.get("key"), prof.get("value")), (["memories", "u1"], "profile", PROFILE))

    # put again: the value is replaced, created_at kept.
    newer = dict(PREFS, coffee="hot, no foam")
    await u1.store.put_item(["memories", "u1", "prefs"], key="coffee", value=newer)
    again = await u1.store.get_item(["memories", "u1", "prefs"], key="coffee")
    expect("put_item again replaces the value", again.get("value"), newer)
    expect("put_item again keeps created_at", again.get("created_at"), item.get("created_at"))
    check("put_item again advances updated_at", again.get("updated_at") != item.get("updated_at"),
          [item.get("updated_at"), again.get("updated_at")], "a later updated_at")

    # search_items without a query: everything under the prefix.
    res = await u1.store.search_items(["memories", "u1"])
    items = res.get("items", []) if isinstance(res, dict) else res
    got = sorted((tuple(i["namespace"]), i["key"]) for i in items)
    expect("search_items under (memories, u1)", got,
           sorted([(("memories", "u1"), "profile"), (("memories", "u1"), "order-a1024"), (("memories", "u1", "prefs"), "coffee")]))
    res = await u1.store.search_items(["memories", "u1", "prefs"])
    expect("search_items under (memories, u1, prefs)", [(i["namespace"], i["key"]) for i in res["items"]], [(["memories", "u1", "prefs"], "coffee")])
    # ... with a filter on the value.
    res = await u1.store.search_items(["memories", "u1"], filter={"kind": "event"})
    expect("search_items filter kind=event", [i["key"] for i in res["items"]], ["order-a1024"])
    res = await u1.store.search_items(["memories", "u1"], filter={"shots": {"$gte": 2}})
    expect("search_items filter shots >= 2", [i["key"] for i in res["items"]], ["coffee"])
    # ... with paging.
    res = await u1.store.search_items(["memories", "u1"], limit=2)
    page2 = await u1.store.search_items(["memories", "u1"], limit=2, offset=2)
    keys = [i["key"] for i in res["items"]] + [i["key"] for i in page2["items"]]
    expect("search_items limit/offset pages", (len(res["items"]), sorted(keys)), (2, sorted(["coffee", "order-a1024", "profile"])))
    # ... with a query: ranked, each with a score.
    res = await u1.store.search_items(["memories", "u1"], query="order A1024 not shipped")
    hits = res["items"]
    check("search_items query finds the order first", bool(hits) and hits[0]["key"] == "order-a1024",
          [(h["key"], h.get("score")) for h in hits], "order-a1024 first")
    check("search_items query results carry a score", bool(hits) and all(is_number(h.get("score")) for h in hits),
          [h.get("score") for h in hits], "a number on each")
    check("search_items query stays in u1", all(h["namespace"][:2] == ["memories", "u1"] for h in hits),
          [h["namespace"] for h in hits], "namespaces under (memories, u1)")
    res = await u1.store.search_items(["memories", "u1"], query="hot coffee", filter={"kind": "profile"})
    expect("search_items query with a filter", [i["key"] for i in res["items"]], ["profile"])

    # list_namespaces, with prefix and max_depth.
    ns = await u1.store.list_namespaces(prefix=["memories"])
    expect("list_namespaces prefix=(memories)", ns.get("namespaces"), [["memories", "u1"], ["memories", "u1", "prefs"]])
    ns = await u1.store.list_namespaces(prefix=["memories", "u1"], max_depth=2)
    expect("list_namespaces max_depth=2", ns.get("namespaces"), [["memories", "u1"]])
    ns = await u1.store.list_namespaces(suffix=["prefs"])
    expect("list_namespaces suffix=(prefs)", ns.get("namespaces"), [["memories", "u1", "prefs"]])
    ns = await admin.store.list_namespaces(prefix=["memories"], max_depth=2)
    expect("list_namespaces with a user:* key", ns.get("namespaces"), [["memories", "u1"], ["memories", "u2"]])

    # Isolation: the u2 key gets 403 for u1's namespace and never sees it.
    expect("u2 get_item in u1's namespace: 403", await status_of(u2.store.get_item(["memories", "u1"], key="profile")), 403)
    expect("u2 put_item in u1's namespace: 403", await status_of(u2.store.put_item(["memories", "u1"], key="x", value={"a": 1})), 403)
    expect("u2 search_items in u1's namespace: 403", await status_of(u2.store.search_items(["memories", "u1"])), 403)
    expect("u2 delete_item in u1's namespace: 403", await status_of(u2.store.delete_item(["memories", "u1"], key="profile")), 403)
    ns = await u2.store.list_namespaces()
    expect("u2 list_namespaces shows only u2", ns.get("namespaces"), [["memories", "u2"]])
    ns = await u2.store.list_namespaces(prefix=["memories", "u1"])
    expect("u2 list_namespaces prefix=(memories, u1) is empty", ns.get("namespaces"), [])
    # A namespace no rule maps is refused, not stored somewhere.
    st = await status_of(u1.store.put_item(["elsewhere", "u1"], key="x", value={"a": 1}))
    check("put_item into an unmapped namespace is a 4xx", isinstance(st, int) and 400 <= st < 500, st, "a 4xx status")
    bad = get_client(url=inp["url"], api_key="mgw_not-a-key")
    expect("a wrong key: 401", await status_of(bad.store.get_item(["memories", "u1"], key="profile")), 401)

    # delete_item, then get_item: the SDK raises NotFoundError (404).
    expect("delete_item returns None", await u1.store.delete_item(["memories", "u1", "prefs"], key="coffee"), None)
    try:
        gone = await u1.store.get_item(["memories", "u1", "prefs"], key="coffee")
        check("get_item after delete raises NotFoundError", False, gone, "NotFoundError (404)")
    except NotFoundError as e:
        expect("get_item after delete raises NotFoundError", e.status_code, 404)
    expect("delete_item again (idempotent)", await status_of(u1.store.delete_item(["memories", "u1", "prefs"], key="coffee")), ("no error", None))
    ns = await u1.store.list_namespaces(prefix=["memories"])
    expect("list_namespaces after the delete", ns.get("namespaces"), [["memories", "u1"]])
    res = await u1.store.search_items(["memories", "u1"])
    expect("search_items after the delete", sorted(i["key"] for i in res["items"]), ["order-a1024", "profile"])

    data("u1_profile", prof)


run(main())
