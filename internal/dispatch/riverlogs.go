package dispatch

import (
	"context"
	"log/slog"
	"strings"

	"github.com/riverqueue/river/rivershared/riversharedmaintenance"
)

// riverStatistics are the endings of River's periodic statistics, which it
// logs at INFO: each producer's job counts (every few seconds while its
// queue works), and each maintenance service's "Ran successfully" with
// what it deleted, rescued or scheduled. The messages begin with the
// service's name ("producer: Producer job counts", "JobCleaner: Ran
// successfully").
var riverStatistics = []string{": Producer job counts", riversharedmaintenance.LogPrefixRanSuccessfully}

// riverLogger is the logger River is given: logger, with River's periodic
// statistics lowered to DEBUG. At INFO a busy gateway's log would be mostly
// those; what River logs otherwise (errors, a job that panicked, a client
// started or stopped) keeps its level. Nil stays nil: River's own default,
// which logs WARN and above.
func riverLogger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return nil
	}
	return slog.New(statisticsToDebug{logger.Handler()})
}

// statisticsToDebug is a handler that lowers River's statistics to DEBUG
// before handing them on.
type statisticsToDebug struct{ next slog.Handler }

// Enabled lets an INFO record through to Handle, which decides once it
// knows the message.
func (h statisticsToDebug) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h statisticsToDebug) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && statistics(r.Message) {
		if !h.next.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		lowered := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
		r.Attrs(func(a slog.Attr) bool {
			lowered.AddAttrs(a)
			return true
		})
		r = lowered
	}
	return h.next.Handle(ctx, r)
}

func (h statisticsToDebug) WithAttrs(attrs []slog.Attr) slog.Handler {
	return statisticsToDebug{h.next.WithAttrs(attrs)}
}

func (h statisticsToDebug) WithGroup(name string) slog.Handler {
	return statisticsToDebug{h.next.WithGroup(name)}
}

// statistics reports whether msg is one of River's periodic statistics.
func statistics(msg string) bool {
	for _, end := range riverStatistics {
		if strings.HasSuffix(msg, end) {
			return true
		}
	}
	return false
}
