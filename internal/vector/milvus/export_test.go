package milvus

// Literal and ScopeValue are literal and scopeValue, for the tests against Milvus Lite.
var (
	Literal    = literal
	ScopeValue = scopeValue
)
