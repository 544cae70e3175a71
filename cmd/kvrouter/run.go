// This file holds what every command shares: its interruptible context and its stderr logger.

package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// interruptible returns the command's context, cancelled on SIGINT or
// SIGTERM so that long-running commands shut down cleanly.
func interruptible(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

// stderrLogger logs text lines at level and above to the command's stderr.
func stderrLogger(cmd *cobra.Command, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
}

// verbosity is the level of commands with a --verbose switch: warnings,
// or everything with it.
func verbosity(verbose bool) slog.Level {
	if verbose {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}
