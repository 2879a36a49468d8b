package dispatch

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// River's periodic statistics (a producer's job counts, a maintenance
// service's "Ran successfully", as River v0.51 words them) are logged at
// DEBUG, with their attributes; everything else River logs keeps its level.
func TestRiverStatisticsAreLoggedAtDebug(t *testing.T) {
	t.Parallel()
	statistics := []string{"producer: Producer job counts", "JobCleaner: Ran successfully", "JobRescuer: Ran successfully",
		"QueueCleaner: Ran successfully", "JobScheduler: Ran successfully"}
	log := func(level slog.Level) []map[string]any {
		var buf bytes.Buffer
		river := riverLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))).With("client_id", "c1")
		for _, msg := range statistics {
			river.Info(msg, "queue", "route_ci", "num_jobs_running", 3)
		}
		river.Info("River client started")
		river.Error("producer: Error fetching jobs", "error", "boom")
		var lines []map[string]any
		for line := range strings.Lines(buf.String()) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			lines = append(lines, m)
		}
		return lines
	}

	// At INFO: River's own lines, none of its statistics.
	got := log(slog.LevelInfo)
	if len(got) != 2 || got[0]["msg"] != "River client started" || got[0]["level"] != "INFO" ||
		got[1]["msg"] != "producer: Error fetching jobs" || got[1]["level"] != "ERROR" {
		t.Fatalf("at INFO, River logged %v; want its client started (INFO) and its error (ERROR) alone", got)
	}

	// At DEBUG: the statistics too, each at DEBUG with its attributes.
	got = log(slog.LevelDebug)
	if len(got) != len(statistics)+2 {
		t.Fatalf("at DEBUG, River logged %d lines, want %d: %v", len(got), len(statistics)+2, got)
	}
	for i, msg := range statistics {
		if l := got[i]; l["msg"] != msg || l["level"] != "DEBUG" || l["queue"] != "route_ci" || l["num_jobs_running"] != 3.0 || l["client_id"] != "c1" {
			t.Errorf("line %d: %v; want %q at DEBUG with its attributes", i, l, msg)
		}
	}
	if got[len(statistics)]["level"] != "INFO" {
		t.Errorf("River client started: %v, want INFO", got[len(statistics)])
	}

	if riverLogger(nil) != nil {
		t.Error("no logger: want River's own default")
	}
}
