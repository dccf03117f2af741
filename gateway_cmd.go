package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/amemory/memory-operator/internal/gateway"
)

// runGateway is `memory-operator gateway`: the process a store's gateway Deployment
// runs. It serves until SIGTERM, then lets in-flight requests finish.
func runGateway(args []string) int {
	cfg, err := gateway.ParseArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail("gateway", err, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := gateway.Run(ctx, cfg, gateway.SecretsFromEnv(), log.With("component", "gateway", "version", version)); err != nil {
		return fail("gateway", err, 1)
	}
	return 0
}
