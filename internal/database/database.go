// Package database opens the gateway's PostgreSQL: DATABASE_URL's, or the
// private server under GATEWAY_DATA_DIR (package pgembed), with the pool
// sized for what the gateway holds at once.
package database

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/pgembed"
	"github.com/hookgate/hookgate/internal/schema"
	"github.com/hookgate/hookgate/internal/throttle"
)

// Mode says whether a caller may use, or start, the private PostgreSQL under
// the data directory when no URL is given.
type Mode int

const (
	// StartOwn starts the private server (serve): it belongs to this process.
	StartOwn Mode = iota
	// ShareOrStart uses the one a running gateway started, or starts it
	// (the operator commands, migrate).
	ShareOrStart
	// ShareOnly uses the one a running gateway started, or fails (bench).
	ShareOnly
)

// Options are what Open needs.
type Options struct {
	// URL is DATABASE_URL; empty: the private server under DataDir.
	URL string
	// DataDir is GATEWAY_DATA_DIR.
	DataDir string
	// Mode says what to do when URL is empty.
	Mode Mode
	// Conns is how many connections the pool needs at least; the pool takes
	// the URL's pool_max_conns when that is more.
	Conns int
	// Schema is GATEWAY_DATABASE_SCHEMA: the pool's connections put it
	// first on their search_path (schema.Use). Empty: schema.Default.
	Schema string
	// Logger says when a private server starts and fails to stop.
	Logger *slog.Logger
}

// StopTimeout bounds the private server's stop.
const StopTimeout = 30 * time.Second

// Open connects to o.URL, or to the private PostgreSQL as o.Mode says. The
// returned func closes the pool and stops a private server it started.
func Open(ctx context.Context, o Options) (*pgxpool.Pool, func(), error) {
	url := o.URL
	var embedded *pgembed.Server
	if url == "" && o.Mode != StartOwn {
		url, _ = pgembed.Running(ctx, o.DataDir, "")
		if url == "" && o.Mode == ShareOnly {
			return nil, nil, fmt.Errorf("no running gateway's PostgreSQL under %s: set DATABASE_URL or GATEWAY_DATA_DIR as the gateway has them", o.DataDir)
		}
	}
	if url == "" {
		var err error
		embedded, err = pgembed.Start(ctx, pgembed.Options{Dir: o.DataDir})
		if err != nil {
			return nil, nil, fmt.Errorf("private PostgreSQL (DATABASE_URL is unset): %w", err)
		}
		o.Logger.InfoContext(ctx, "private PostgreSQL started", "data_dir", o.DataDir)
		url = embedded.URL()
	}
	stopEmbedded := func() {
		if embedded == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if err := embedded.Stop(sctx); err != nil {
			o.Logger.Error("stop private PostgreSQL", "error", err)
		}
	}
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		stopEmbedded()
		// Not err itself: it may quote the URL and its password.
		return nil, nil, errors.New("DATABASE_URL: not a valid PostgreSQL URL")
	}
	// JIT compilation costs hundreds of milliseconds on the console's larger
	// queries and gains nothing on short ones; a URL may still turn it on.
	if _, set := poolCfg.ConnConfig.RuntimeParams["jit"]; !set {
		poolCfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	poolCfg.MaxConns = max(poolCfg.MaxConns, int32(o.Conns))
	// hookgate's schema first, then the service's own search_path (the
	// URL's, the role's or the server's): a handler finds the service's
	// tables by their plain names wherever its migration made them.
	name := cmp.Or(o.Schema, schema.Default)
	servicePath, err := schema.ServicePath(ctx, poolCfg.ConnConfig, name)
	if err != nil {
		stopEmbedded()
		return nil, nil, fmt.Errorf("database: %w", err)
	}
	schema.Use(poolCfg.ConnConfig, name, servicePath)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		stopEmbedded()
		return nil, nil, fmt.Errorf("database: %w", err)
	}
	return pool, func() { closePool(pool, o.Logger); stopEmbedded() }, nil
}

// PoolCloseTimeout bounds how long closing waits for connections still in
// use: a job whose code ignores its cancelled context holds its connection,
// and pgxpool's Close would wait for it forever.
const PoolCloseTimeout = 5 * time.Second

// closePool closes pool, waiting at most PoolCloseTimeout for connections in
// use; past it, the stop goes on (a private PostgreSQL is then stopped
// under them) and the connections are left to the process's exit.
func closePool(pool *pgxpool.Pool, logger *slog.Logger) {
	done := make(chan struct{})
	go func() { pool.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(PoolCloseTimeout):
		logger.Error("database connections still in use after the stop (a job that does not return when its context ends?); stopping without them",
			"in_use", pool.Stat().AcquiredConns())
	}
}

// schemaEvery is how often Readiness checks that the schema is current once
// it was: a check takes several statements, and a schema falls behind only
// when another process migrates it.
const schemaEvery = 30 * time.Second

// Readiness is /readyz's check (which the server runs at most once a second):
// the database answers a ping, and its schema is current.
func Readiness(pool *pgxpool.Pool) func(context.Context) error {
	current := &throttle.Value[struct{}]{Every: schemaEvery, RetryErrors: true, Read: func(ctx context.Context) (struct{}, error) {
		return struct{}{}, schema.Check(ctx, pool)
	}}
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("database: %w", err)
		}
		_, _, err := current.Get(ctx)
		return err
	}
}
