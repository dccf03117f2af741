"""Writes testdata for the Go JsonPlus decoder with LangGraph's own serializer.

Each case is (name, value); the file <name>.msgpack holds dumps_typed(value)'s bytes
and <name>.json what LangGraph itself reads back as JSON-ish values (the Go decoder
must agree). Run: bin/clients-venv/bin/python internal/importer/testdata/gen_jsonplus.py
"""
import datetime, decimal, enum, json, os, pathlib, sys, uuid
from collections import deque
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, SystemMessage, messages_to_dict
import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _msgpack_ext_hook_to_json

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)) / "jsonplus"
out.mkdir(exist_ok=True)
serde = JsonPlusSerializer()

class Color(enum.Enum):
    RED = "red"

msgs = [
    SystemMessage("you are a support agent", id="m0"),
    HumanMessage("上次我不是让你把咖啡换热的了吗？", id="m1"),
    AIMessage("", id="m2", tool_calls=[{"name": "lookup_order", "args": {"order_id": "A-17", "items": [1, 2], "opts": {"fast": True}}, "id": "call_1", "type": "tool_call"}]),
    ToolMessage('{"status": "not shipped"}', tool_call_id="call_1", name="lookup_order", id="m3"),
    AIMessage([{"type": "text", "text": "Your order A-17 has not shipped."}], id="m4"),
]
cases = {
    "messages": msgs,
    "scalars": {"s": "x", "i": 7, "neg": -3, "big": 2**63 - 1, "f": 1.5, "t": True, "n": None, "l": [1, "a"], 3: "int key"},
    "datetime": datetime.datetime(2026, 11, 20, 8, 30, 1, 123456, tzinfo=datetime.timezone.utc),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "extras": {"dec": decimal.Decimal("1.25"), "set": {3}, "deque": deque([1, 2]), "enum": Color.RED,
               "date": datetime.date(2026, 1, 2), "td": datetime.timedelta(days=1, seconds=2)},
}
expected = {}
for name, value in cases.items():
    typ, data = serde.dumps_typed(value)
    assert typ == "msgpack", (name, typ)
    (out / f"{name}.msgpack").write_bytes(data)
    # LangGraph's own msgpack-to-JSON view (the reviver its JSON exports use).
    expected[name] = ormsgpack.unpackb(data, ext_hook=_msgpack_ext_hook_to_json, option=ormsgpack.OPT_NON_STR_KEYS)
(out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1))
print("wrote", len(cases), "cases to", out)
