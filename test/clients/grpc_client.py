"""A Python client of the gateway's gRPC API, generated from api/proto by grpcio-tools.

Input (stdin, JSON): addr (the gRPC API, host:port), proto (the api/proto directory),
out (a scratch directory for the generated code), a (a key for user:a and session:*),
b (a key for user:b), ro (a read-only key for user:a). Runs the isolation and
bad-input cases of the native API through grpcio and prints the report (see
report.py).
"""
import json
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from grpc_tools import protoc
from google.rpc import error_details_pb2

from report import check, data, expect, finish, read_input

inp = read_input()
# The client is generated here, now, from the .proto the gateway was built from.
rc = protoc.main(["grpc_tools.protoc", "-I" + inp["proto"], "-I" + os.path.join(os.path.dirname(protoc.__file__), "_proto"),
                  "--python_out=" + inp["out"], "--grpc_python_out=" + inp["out"], "memory/v1/memory.proto"])
if rc != 0:
    check("grpc_tools.protoc generates the client", False, rc, 0)
    finish()
sys.path.insert(0, inp["out"])
from memory.v1 import memory_pb2 as pb  # noqa: E402
from memory.v1 import memory_pb2_grpc as pbg  # noqa: E402

channel = grpc.insecure_channel(inp["addr"])
stub = pbg.MemoryServiceStub(channel)


def md(key):
    return (("x-api-key", key),)


def failure(fn, req, key):
    """Call fn and return (grpc status code name, ErrorInfo reason) of its error, or
    ("OK", None)."""
    try:
        fn(req, metadata=md(key) if key else None, timeout=30)
        return ("OK", None)
    except grpc.RpcError as e:
        st = rpc_status.from_call(e)
        reason = None
        for d in (st.details if st else []):
            info = error_details_pb2.ErrorInfo()
            if d.Unpack(info):
                reason = info.reason
        return (e.code().name, reason)


def main():
    a, b, ro = inp["a"], inp["b"], inp["ro"]
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="memory.v1.MemoryService"), timeout=30)
    expect("health: memory.v1.MemoryService is SERVING", health.status, health_pb2.HealthCheckResponse.SERVING)

    w = stub.Remember(pb.NewMemory(scope="user:a", memory_type="semantic", content_json=json.dumps({"text": "Prefers green tea"})),
                      metadata=md(a), timeout=30)
    expect("Remember: inserted", w.outcome, "inserted")
    wb = stub.Remember(pb.NewMemory(scope="user:b", memory_type="semantic", content_json=json.dumps({"text": "Prefers coffee"})),
                       metadata=md(b), timeout=30)
    data("ids", {"a": w.memory_id, "b": wb.memory_id})
    found = stub.Search(pb.SearchRequest(scope="user:a", query="what tea", top_k=5), metadata=md(ro), timeout=30)
    expect("Search by the reader finds a's memory", [r.memory.memory_id for r in found.results][:1], [w.memory_id])
    expect("Search: content round-trips as JSON", json.loads(found.results[0].memory.content_json) if found.results else None,
           {"text": "Prefers green tea"})

    # Isolation: a key sees nothing of another's scopes.
    expect("Get of b's memory with a's key", failure(stub.Get, pb.GetRequest(memory_id=wb.memory_id), a), ("NOT_FOUND", "not_found"))
    expect("Search of user:b with a's key", failure(stub.Search, pb.SearchRequest(scope="user:b", query="coffee"), a),
           ("PERMISSION_DENIED", "scope_forbidden"))
    expect("List of user:b with a's key", failure(stub.List, pb.ListRequest(scope="user:b"), a), ("PERMISSION_DENIED", "scope_forbidden"))
    expect("Forget of user:b with a's key", failure(stub.Forget, pb.ForgetRequest(scope="user:b"), a), ("PERMISSION_DENIED", "scope_forbidden"))
    expect("Delete of b's memory with a's key", failure(stub.Delete, pb.DeleteRequest(memory_id=wb.memory_id), a), ("NOT_FOUND", "not_found"))
    expect("Remember with the read-only key", failure(stub.Remember, pb.NewMemory(scope="user:a", memory_type="semantic", content_json="{}"), ro),
           ("PERMISSION_DENIED", "read_only"))
    expect("Remember without a key", failure(stub.Remember, pb.NewMemory(scope="user:a", memory_type="semantic", content_json="{}"), None),
           ("UNAUTHENTICATED", "unauthenticated"))
    expect("WhoAmI with a wrong key", failure(stub.WhoAmI, pb.WhoAmIRequest(), "mk_not_a_key"), ("UNAUTHENTICATED", "unauthenticated"))
    stub.AppendTurns(pb.AppendTurnsRequest(session="session:py", owner="user:a", turns=[pb.TurnIn(role="user", content_json='"hi"')]),
                     metadata=md(a), timeout=30)
    # b's key may use every session, but not a's: a's session is no session to it.
    expect("GetSession of a's session with b's key", failure(stub.GetSession, pb.GetSessionRequest(session="session:py"), b),
           ("NOT_FOUND", "not_found"))

    # Bad input: the native API's codes, as INVALID_ARGUMENT.
    bad = [
        ("content that is not JSON", stub.Remember, pb.NewMemory(scope="user:a", memory_type="semantic", content_json="{"), "invalid_json"),
        ("content that is a string", stub.Remember, pb.NewMemory(scope="user:a", memory_type="semantic", content_json='"x"'), "invalid_content"),
        ("content with a NUL", stub.Remember, pb.NewMemory(scope="user:a", memory_type="semantic", content_json='{"t":"a\\u0000b"}'), "invalid_content"),
        ("an unknown memory type", stub.Remember, pb.NewMemory(scope="user:a", memory_type="dream", content_json="{}"), "invalid_type"),
        ("a scope that is not one", stub.Remember, pb.NewMemory(scope="a", memory_type="semantic", content_json="{}"), "invalid_scope"),
        ("no scope", stub.Search, pb.SearchRequest(query="tea"), "invalid_scope"),
        ("a blank query", stub.Search, pb.SearchRequest(scope="user:a", query="  "), "invalid_request"),
        ("top_k over 100", stub.Search, pb.SearchRequest(scope="user:a", query="tea", top_k=101), "invalid_request"),
        ("an unknown mode", stub.Search, pb.SearchRequest(scope="user:a", query="tea", mode="psychic"), "invalid_request"),
        ("base_score over 1", stub.Remember, pb.NewMemory(scope="user:a", memory_type="semantic", content_json="{}", base_score=1.5), "invalid_request"),
        ("a memory_id with a NUL", stub.Get, pb.GetRequest(memory_id="a\x00b"), "invalid_request"),
        ("an empty batch", stub.RememberBatch, pb.RememberBatchRequest(), "invalid_request"),
        ("a list limit over 1000", stub.List, pb.ListRequest(scope="user:a", limit=1001), "invalid_request"),
        ("a summary past the last turn", stub.SummarizeSession, pb.SummarizeSessionRequest(session="session:py", through=5, content_json='"s"'), "invalid_request"),
    ]
    for name, fn, req, reason in bad:
        expect("bad input: " + name, failure(fn, req, a), ("INVALID_ARGUMENT", reason))
    expect("a batch of 1,001", failure(stub.RememberBatch, pb.RememberBatchRequest(
        memories=[pb.NewMemory(scope="user:a", memory_type="semantic", content_json="{}")] * 1001), a), ("INVALID_ARGUMENT", "batch_too_large"))

    # Nothing bad was stored: a's scope holds the one memory.
    listed = stub.List(pb.ListRequest(scope="user:a"), metadata=md(a), timeout=30)
    expect("user:a holds only what was acknowledged", [m.memory_id for m in listed.memories], [w.memory_id])
    f = stub.Forget(pb.ForgetRequest(scope="user:a", reason="test"), metadata=md(a), timeout=30)
    expect("Forget: one memory", f.deleted, 1)
    expect("the session of a forgotten owner is gone", failure(stub.GetSession, pb.GetSessionRequest(session="session:py"), a),
           ("NOT_FOUND", "not_found"))


try:
    main()
except Exception as e:  # noqa: BLE001 - every crash goes into the report
    import traceback
    traceback.print_exc()
    check("the script ran to the end", False, "%s: %s" % (type(e).__name__, e), "no exception")
finish()
