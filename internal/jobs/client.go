package jobs

import (
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// ClientConfig configures the River client that works dispatches.
type ClientConfig struct {
	// Workers is how many dispatches one process works at once. Defaults to 50.
	Workers int
	// Logger receives River's logs.
	Logger *slog.Logger
}

// NewClient returns a River client that works dispatch jobs with w. It is not
// started.
func NewClient(pool *pgxpool.Pool, w *DispatchWorker, cfg ClientConfig) (*river.Client[pgx.Tx], error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 50
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return nil, fmt.Errorf("register dispatch worker: %w", err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:  cfg.Logger,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers: workers,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}

// NewInsertClient returns a River client that only inserts jobs.
func NewInsertClient(pool *pgxpool.Pool, logger *slog.Logger) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}
