//go:build tools

// Package tools pins the MinIO server so `go build github.com/minio/minio` resolves here.
package tools

import _ "github.com/minio/minio"
