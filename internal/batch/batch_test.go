package batch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/batch"
)

// Each caller gets its own item's result; callers that arrive while a batch
// runs share the next one; a failed batch fails each of its callers.
func TestBatcher(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := &batch.Batcher[int, int]{
		Concurrency: 1,
		MaxBatch:    10,
		Do: func(_ context.Context, items []int) ([]int, error) {
			mu.Lock()
			sizes = append(sizes, len(items))
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				<-release // hold the first batch while others queue up
			}
			if items[0] < 0 {
				return nil, errors.New("batch failed")
			}
			out := make([]int, len(items))
			for i, v := range items {
				out[i] = v * 2
			}
			return out, nil
		},
	}
	var wg sync.WaitGroup
	results := make([]int, 26)
	wg.Go(func() { results[0], _ = b.Submit(context.Background(), 0) })
	time.Sleep(50 * time.Millisecond) // the first batch is running
	for i := 1; i < 26; i++ {
		wg.Go(func() { results[i], _ = b.Submit(context.Background(), i) })
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, r := range results {
		if r != 2*i {
			t.Fatalf("result %d = %d", i, r)
		}
	}
	mu.Lock()
	if len(sizes) != 4 || sizes[0] != 1 || sizes[1] != 10 || sizes[2] != 10 || sizes[3] != 5 {
		t.Fatalf("batch sizes %v, want [1 10 10 5]", sizes)
	}
	mu.Unlock()

	if _, err := b.Submit(context.Background(), -1); err == nil {
		t.Fatal("a failed batch returned no error")
	}
}
