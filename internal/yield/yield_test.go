package yield_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/dbtest"
	"github.com/hookgate/hookgate/internal/yield"
)

// entered runs Enter in a goroutine and says on the channel when it returns.
func entered(g *yield.Gate, until time.Duration) chan struct{} {
	done := make(chan struct{})
	go func() { g.Enter(context.Background(), time.Now().Add(until)); close(done) }()
	return done
}

func returns(t *testing.T, done chan struct{}, why string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("a held dispatch stayed held: " + why)
	}
}

func staysHeld(t *testing.T, done chan struct{}, why string) {
	t.Helper()
	select {
	case <-done:
		t.Fatal("a dispatch went on: " + why)
	case <-time.After(40 * time.Millisecond):
	}
}

// acked answers n deliveries, each arrived and acknowledged.
func acked(g *yield.Gate, n int) {
	for range n {
		g.Arrived()
		g.Acked()
	}
}

// heldNow waits until want dispatches are held.
func heldNow(t *testing.T, g *yield.Gate, want int) {
	t.Helper()
	dbtest.Eventually(t, 2*time.Second, fmt.Sprintf("%d held", want), func() error {
		if n := g.Waiting(); n != want {
			return fmt.Errorf("%d held", n)
		}
		return nil
	})
}

// A dispatch holds back only while the machine is full and deliveries wait
// for their acknowledgement: a free core, or ingest idle, lets it go at once.
func TestGateHoldsOnlyWhileTheMachineIsFullAndIngestWaits(t *testing.T) {
	var full atomic.Bool
	g := yield.NewGate(full.Load)
	forever := time.Hour

	full.Store(true)
	returns(t, entered(g, forever), "the machine is full but no delivery waits")
	full.Store(false)
	g.Arrived()
	returns(t, entered(g, forever), "a delivery waits but a core is free")
	if g.Held() != 0 {
		t.Fatalf("Held = %d with a core free or ingest idle", g.Held())
	}

	full.Store(true)
	held := entered(g, forever)
	staysHeld(t, held, "the machine is full, a delivery waits and nothing is earned")
	if g.Waiting() != 1 {
		t.Fatalf("Waiting = %d, want 1", g.Waiting())
	}
	// An acknowledgement that leaves ingest idle lets it go, once ingest has
	// stayed idle for a moment.
	g.Acked()
	returns(t, held, "ingest went idle")

	// An acknowledgement that finds a core free lets one held dispatch go,
	// not all of them; the next one another.
	for range 3 {
		g.Arrived()
	}
	a, b := entered(g, forever), entered(g, forever)
	dbtest.Eventually(t, time.Second, "two held", func() error {
		if n := g.Waiting(); n != 2 {
			return fmt.Errorf("%d held", n)
		}
		return nil
	})
	full.Store(false)
	g.Acked()
	var second chan struct{}
	select {
	case <-a:
		second = b
	case <-b:
		second = a
	case <-time.After(2 * time.Second):
		t.Fatal("no held dispatch went on when an acknowledgement found a core free")
	}
	staysHeld(t, second, "one acknowledgement found a core free: one goes")
	g.Acked()
	returns(t, second, "a second acknowledgement found a core free")
	g.Acked()
}

// While the machine stays full, every AcksPerDispatch acknowledgements earn
// one dispatch. Earned dispatches wake held ones in groups: none until Group
// are earned (or as many as are held, when fewer), then that many at once;
// earnings are bounded, so a burst with nothing held saves up no flood.
func TestGateEarnsOneDispatchPerAcksPerDispatch(t *testing.T) {
	g := yield.NewGate(func() bool { return true })
	g.Arrived() // a delivery that stays waiting: ingest is never idle here

	// Two held: a group is two.
	first, second := entered(g, time.Hour), entered(g, time.Hour)
	heldNow(t, g, 2)
	acked(g, 2*yield.AcksPerDispatch-1)
	staysHeld(t, first, "one dispatch earned, and a group of two held")
	staysHeld(t, second, "one dispatch earned, and a group of two held")
	acked(g, 1)
	returns(t, first, "two dispatches earned for two held")
	returns(t, second, "two dispatches earned for two held")

	// More than a group held: each Group earned let exactly Group go.
	var done []chan struct{}
	for range yield.Group + 4 {
		done = append(done, entered(g, time.Hour))
	}
	heldNow(t, g, yield.Group+4)
	acked(g, (yield.Group-1)*yield.AcksPerDispatch)
	staysHeld(t, done[0], "one dispatch short of a group earned")
	if g.Waiting() != yield.Group+4 {
		t.Fatalf("%d of %d held went on before a group was earned", yield.Group+4-g.Waiting(), yield.Group+4)
	}
	acked(g, yield.AcksPerDispatch)
	heldNow(t, g, 4)
	acked(g, 4*yield.AcksPerDispatch) // the four left are a group of four
	heldNow(t, g, 0)
	for _, d := range done {
		returns(t, d, "every held dispatch earned")
	}

	acked(g, 1000*yield.AcksPerDispatch)
	before := g.Held()
	for i := range 64 {
		t0 := time.Now()
		g.Enter(context.Background(), time.Now().Add(time.Hour))
		if time.Since(t0) > 500*time.Millisecond {
			t.Fatalf("dispatch %d waited with dispatches earned", i+1)
		}
	}
	if g.Held() != before {
		t.Fatalf("%d of 64 earned dispatches were held", g.Held()-before)
	}
	staysHeld(t, entered(g, 100*time.Millisecond), "a 65th dispatch: more than 64 were saved up")
}

// A dispatch is never held past its bound, nor past its context; a moment
// without a delivery waiting that ends at once is not idle.
func TestGateBoundsEveryWait(t *testing.T) {
	g := yield.NewGate(func() bool { return true })
	g.Arrived()
	t0 := time.Now()
	g.Enter(context.Background(), time.Now().Add(30*time.Millisecond))
	if waited := time.Since(t0); waited < 30*time.Millisecond || waited > time.Second {
		t.Errorf("held %s, want about 30 ms", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.Enter(ctx, time.Now().Add(time.Hour))
	if g.Held() != 2 || g.Waiting() != 0 {
		t.Errorf("Held = %d, Waiting = %d; want 2 and 0", g.Held(), g.Waiting())
	}

	// Under a closed loop of senders, the count touches zero as a batch's
	// senders get their answers, and they send again at once.
	held := entered(g, time.Hour)
	dbtest.Eventually(t, time.Second, "held", func() error {
		if g.Waiting() != 1 {
			return fmt.Errorf("%d held", g.Waiting())
		}
		return nil
	})
	g.Acked()
	g.Arrived()
	staysHeld(t, held, "ingest was idle for a moment only")
	g.Acked()
	returns(t, held, "ingest stayed idle")

	never := yield.Never()
	never.Arrived()
	returns(t, entered(never, time.Hour), "Never holds nothing")
}

// Many dispatches and acknowledgements at once: every dispatch goes on, each
// within its bound, and none is left counted as held.
func TestGateUnderConcurrency(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	g := yield.NewGate(full.Load)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			g.Arrived()
			time.Sleep(time.Duration(i%7) * time.Millisecond)
			g.Acked()
		})
		wg.Go(func() { g.Enter(context.Background(), time.Now().Add(time.Second)) })
		if i == 150 {
			full.Store(false)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	returns(t, done, "200 dispatches beside 200 acknowledgements")
	if g.Waiting() != 0 {
		t.Fatalf("Waiting = %d after every dispatch went on", g.Waiting())
	}
}

// The machine's count is the kernel's runnable tasks on Linux: a machine
// with every core spinning is full. (That the same machine idle is not full
// is TestMachineReadsTheKernelsRunnableTasks's, on a kernel count it is
// given: on a shared machine, with other tests running beside this one, no
// moment may be idle.)
func TestMachineFullWhileEveryCoreIsTaken(t *testing.T) {
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		t.Skip("no /proc/loadavg: the machine is read from Go's scheduler")
	}
	m := yield.NewMachine()
	if m.Cores() != runtime.GOMAXPROCS(0) {
		t.Fatalf("Cores = %d, want GOMAXPROCS %d", m.Cores(), runtime.GOMAXPROCS(0))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 * m.Cores() {
		wg.Go(func() {
			for !stop.Load() {
			}
		})
	}
	full, all := 0, 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		all++
		if m.Full() {
			full++
		}
	}
	stop.Store(true)
	wg.Wait()
	if full < all*3/4 {
		t.Errorf("with twice as many threads spinning as cores: full %d of %d readings", full, all)
	}
}

// Held dispatches go on in the order they came, a group at a time, and
// OnWake hears each group's size before it goes: a dispatch that arrives
// while others are held queues behind them, even with dispatches earned, so
// that it takes no permission meant for the group (taken by dispatches as
// they arrived, a group came through a few at a time, and their claims did
// not share a batch).
func TestGateSendsHeldDispatchesOnInGroups(t *testing.T) {
	g := yield.NewGate(func() bool { return true })
	var mu sync.Mutex
	var groups []int
	var gone atomic.Int64 // dispatches of the test that returned from Enter
	g.OnWake(func(n int) {
		if k := gone.Load(); k != 0 {
			t.Errorf("OnWake heard of a group after %d of its dispatches went on", k)
		}
		mu.Lock()
		groups = append(groups, n)
		mu.Unlock()
	})
	heard := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(groups)
	}
	g.Arrived() // a delivery that stays waiting: ingest is never idle here
	var group []chan struct{}
	for range yield.Group {
		done := make(chan struct{})
		go func() {
			g.Enter(context.Background(), time.Now().Add(time.Hour))
			gone.Add(1)
			close(done)
		}()
		group = append(group, done)
	}
	heldNow(t, g, yield.Group)
	acked(g, (yield.Group-1)*yield.AcksPerDispatch)
	late := entered(g, time.Hour)
	staysHeld(t, late, "it came after a group held, with that group's dispatches not all earned")
	acked(g, yield.AcksPerDispatch)
	for _, d := range group {
		returns(t, d, "a group earned for the group held first")
	}
	staysHeld(t, late, "the group earned went to those held before it")
	gone.Store(0)
	if h := heard(); !slices.Equal(h, []int{yield.Group}) {
		t.Fatalf("OnWake heard %v, want [%d]", h, yield.Group)
	}
	acked(g, yield.AcksPerDispatch)
	returns(t, late, "one earned, one held")
	if h := heard(); !slices.Equal(h, []int{yield.Group, 1}) {
		t.Fatalf("OnWake heard %v, want [%d 1]", h, yield.Group)
	}
}

// Earned dispatches go to dispatches held, never ahead of them: while a few
// are held, acknowledgements that find a core free send each on once, and
// what they earn beyond those is bounded like any earnings (maxEarned, 64),
// however the goroutines are scheduled.
func TestGateNeverSendsMoreThanItHolds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var full atomic.Bool
	full.Store(true)
	g := yield.NewGate(full.Load)
	g.Arrived() // a delivery that stays waiting: ingest is never idle here
	var held []chan struct{}
	for range 4 {
		held = append(held, entered(g, time.Hour))
	}
	heldNow(t, g, 4)
	full.Store(false)
	acked(g, 64)
	for _, d := range held {
		returns(t, d, "acknowledgements found a core free")
	}
	full.Store(true)
	went := 0
	for range 200 {
		before := g.Held()
		g.Enter(context.Background(), time.Now().Add(time.Millisecond))
		if g.Held() == before {
			went++
		}
	}
	if went > 64 {
		t.Fatalf("%d dispatches went on through a full gate with none earned since: more than the 64 it may save up", went)
	}
}

// A held dispatch that goes on unbidden (its context ended) leaves the
// others few enough for the dispatches earned: they go on at once, not at
// their bound.
func TestGateLetsTheRestGoWhenOneLeaves(t *testing.T) {
	g := yield.NewGate(func() bool { return true })
	g.Arrived()
	ctx, cancel := context.WithCancel(context.Background())
	leaving := make(chan struct{})
	go func() { g.Enter(ctx, time.Now().Add(time.Hour)); close(leaving) }()
	heldNow(t, g, 1)
	a, b := entered(g, time.Hour), entered(g, time.Hour)
	heldNow(t, g, 3)
	acked(g, 2*yield.AcksPerDispatch)
	staysHeld(t, a, "two earned for three held")
	cancel()
	returns(t, leaving, "its context ended")
	returns(t, a, "two earned for the two left held")
	returns(t, b, "two earned for the two left held")
}
