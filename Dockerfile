# syntax=docker/dockerfile:1
# Build: docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t <image> .
# (or `make docker-build IMG=<image>`). Needs BuildKit for the cache mounts.

# --- builder -------------------------------------------------------------------------
# Runs on the build host's platform and cross-compiles for the target (pure Go, no cgo).
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev

WORKDIR /workspace
# Download modules in their own layer, so source changes do not invalidate it.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

# Source. .dockerignore keeps out bin/, .git, config/, charts/ and the rest.
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /memory-operator .

# --- runtime -------------------------------------------------------------------------
# Static, shell-less, non-root (uid 65532); carries CA certificates and tzdata.
FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="memory-operator" \
      org.opencontainers.image.description="Kubernetes operator for AI-agent memory stores" \
      org.opencontainers.image.source="https://github.com/amemory/memory-operator" \
      org.opencontainers.image.version="${VERSION}"
WORKDIR /
COPY --from=builder /memory-operator /memory-operator
USER 65532:65532
ENTRYPOINT ["/memory-operator"]
# The same binary runs the controllers and the workers of the operator's Jobs.
CMD ["manager"]
