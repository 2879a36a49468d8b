package batch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	started := make(chan struct{})
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
				close(started)
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
	<-started // the first batch is running
	for i := 1; i < 26; i++ {
		wg.Go(func() { results[i], _ = b.Submit(context.Background(), i) })
	}
	for b.Waiting() < 25 {
		time.Sleep(time.Millisecond)
	}
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

// While every batch is stuck (a database that hangs rather than refusing),
// callers are refused at once past MaxQueue, the waiting ones give up after
// MaxWait, and one whose caller is gone is withdrawn: none of their items
// ever runs. The stuck batch's own caller still gets its result.
func TestBatcherBoundsItsQueue(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var ran []int
	b := &batch.Batcher[int, int]{
		Concurrency: 1,
		MaxQueue:    3,
		MaxWait:     200 * time.Millisecond,
		Do: func(_ context.Context, items []int) ([]int, error) {
			mu.Lock()
			ran = append(ran, items...)
			mu.Unlock()
			started <- struct{}{}
			<-release
			return items, nil
		},
	}
	first := make(chan error, 1)
	go func() { _, err := b.Submit(context.Background(), 0); first <- err }()
	<-started // item 0's batch is running and stuck

	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range 3 {
		wg.Go(func() { _, errs[i] = b.Submit(context.Background(), i+1) })
	}
	for b.Waiting() < 3 {
		time.Sleep(time.Millisecond)
	}
	_, errs[3] = b.Submit(context.Background(), 4) // the queue is full
	wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, errs[4] = b.Submit(ctx, 5) // its caller is gone before a batch takes it
	for i := range 3 {
		if !errors.Is(errs[i], batch.ErrQueueTimeout) {
			t.Errorf("waiting item %d: %v, want ErrQueueTimeout", i+1, errs[i])
		}
	}
	if !errors.Is(errs[3], batch.ErrQueueFull) {
		t.Errorf("item 4: %v, want ErrQueueFull", errs[3])
	}
	if !errors.Is(errs[4], context.Canceled) || b.Waiting() != 0 {
		t.Errorf("item 5: %v, %d waiting; want context.Canceled, 0", errs[4], b.Waiting())
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the stuck batch's caller: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 || ran[0] != 0 {
		t.Fatalf("items run %v; the withdrawn ones must never run", ran)
	}
}

// A batch takes items while their weight fits MaxWeight, and always at least
// one: a heavy item commits alone.
func TestBatcherBoundsABatchsWeight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var batches [][]int
	b := &batch.Batcher[int, int]{
		Concurrency: 1,
		Weight:      func(v int) int64 { return int64(v) },
		MaxWeight:   10,
		Do: func(_ context.Context, items []int) ([]int, error) {
			mu.Lock()
			batches = append(batches, items)
			first := len(batches) == 1
			mu.Unlock()
			if first {
				started <- struct{}{}
				<-release
			}
			return items, nil
		},
	}
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.Submit(context.Background(), 1) })
	<-started
	for i, v := range []int{4, 5, 2, 30, 3} { // queued in this order
		wg.Go(func() { _, _ = b.Submit(context.Background(), v) })
		for b.Waiting() < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(batches); got != "[[1] [4 5] [2] [30] [3]]" {
		t.Fatalf("batches %s, want [[1] [4 5] [2] [30] [3]]", got)
	}
}

// A batch waits for the items Expect announced, so that items submitted one
// after another share it instead of the first running alone; it waits no
// longer than Linger for those that never come.
func TestBatcherWaitsForExpectedItems(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	newBatcher := func(linger time.Duration) *batch.Batcher[int, int] {
		return &batch.Batcher[int, int]{
			Concurrency: 2,
			Linger:      linger,
			Do: func(_ context.Context, items []int) ([]int, error) {
				mu.Lock()
				sizes = append(sizes, len(items))
				mu.Unlock()
				return items, nil
			},
		}
	}
	sizesNow := func() []int {
		mu.Lock()
		defer mu.Unlock()
		s := slices.Clone(sizes)
		sizes = nil
		return s
	}

	b := newBatcher(time.Hour)
	b.Expect(5)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if _, err := b.Submit(context.Background(), i); err != nil {
				t.Errorf("item %d: %v", i, err)
			}
		})
		time.Sleep(10 * time.Millisecond) // each comes alone, after the one before
	}
	wg.Wait()
	if s := sizesNow(); !slices.Equal(s, []int{5}) {
		t.Fatalf("batch sizes %v for five items expected together, want [5]", s)
	}

	// Two of three announced never come: the one that did runs once Linger
	// has passed, and the next item is not held for them.
	b = newBatcher(50 * time.Millisecond)
	b.Expect(3)
	submitsWithin(t, b, 5*time.Second, "a batch waited past Linger for items that never came")
	if _, err := b.Submit(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if s := sizesNow(); !slices.Equal(s, []int{1, 1}) {
		t.Fatalf("batch sizes %v, want [1 1]", s)
	}
}

// Linger bounds a batch's wait however often more items are announced.
func TestBatcherLingersNoLongerThanLinger(t *testing.T) {
	t.Parallel()
	b := &batch.Batcher[int, int]{
		Concurrency: 1,
		Linger:      100 * time.Millisecond,
		Do:          func(_ context.Context, items []int) ([]int, error) { return items, nil },
	}
	stop := make(chan struct{})
	announcing := make(chan struct{})
	go func() { // announces an item every 20 ms that never comes
		defer close(announcing)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				b.Expect(1)
			}
		}
	}()
	submitsWithin(t, b, 3*time.Second, "a batch kept waiting past Linger while items were announced again and again")
	close(stop)
	<-announcing
}

// submitsWithin submits an item and fails the test with why when its batch
// has not run within d.
func submitsWithin(t *testing.T, b *batch.Batcher[int, int], d time.Duration, why string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := b.Submit(context.Background(), 1); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatal(why)
	}
}
