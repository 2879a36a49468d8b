package throttle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/throttle"
)

// However many ask at once, the value is read once per interval, and only the
// call that read it says so.
func TestValueIsReadOncePerInterval(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	v := &throttle.Value[int64]{Every: time.Hour, Read: func(context.Context) (int64, error) {
		return reads.Add(1), nil
	}}
	var wg sync.WaitGroup
	var fresh atomic.Int64
	for range 100 {
		wg.Go(func() {
			got, f, err := v.Get(context.Background())
			if got != 1 || err != nil {
				t.Errorf("got %d, %v", got, err)
			}
			if f {
				fresh.Add(1)
			}
		})
	}
	wg.Wait()
	if reads.Load() != 1 || fresh.Load() != 1 {
		t.Fatalf("%d reads, %d fresh answers; want 1 and 1", reads.Load(), fresh.Load())
	}
}

// With RetryErrors a failed read is not kept; without it, it is, like a value.
func TestFailedReadsAreKeptUnlessRetried(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		var reads atomic.Int64
		v := &throttle.Value[int]{Every: time.Hour, RetryErrors: retry, Read: func(context.Context) (int, error) {
			reads.Add(1)
			return 0, errors.New("down")
		}}
		for range 3 {
			if _, _, err := v.Get(context.Background()); err == nil {
				t.Fatal("no error")
			}
		}
		if want := map[bool]int64{false: 1, true: 3}[retry]; reads.Load() != want {
			t.Errorf("RetryErrors %v: %d reads, want %d", retry, reads.Load(), want)
		}
	}
}

// The read runs on a context of its own: a caller that is gone does not
// cancel it for the others.
func TestReadOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v := &throttle.Value[bool]{Every: time.Hour, Read: func(ctx context.Context) (bool, error) { return ctx.Err() == nil, nil }}
	if alive, _, _ := v.Get(ctx); !alive {
		t.Fatal("the read got the caller's cancelled context")
	}
}
