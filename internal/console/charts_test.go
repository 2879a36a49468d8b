package console

import (
	"testing"
	"time"
)

// A count axis goes up in 3 to 5 steps of 1, 2 or 5 times a power of ten,
// to the first such top that holds the tallest bar.
func TestScale(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ v, top, step int64 }{
		{0, 3, 1}, {1, 3, 1}, {3, 3, 1}, {4, 4, 1}, {5, 5, 1}, {6, 6, 2}, {7, 8, 2}, {10, 10, 2}, {11, 15, 5},
		{26, 30, 10}, {99, 100, 20}, {101, 150, 50}, {1234, 1500, 500}, {4999, 5000, 1000},
	} {
		top, step := scale(tt.v)
		if top != tt.top || step != tt.step {
			t.Errorf("scale(%d) = %d by %d, want %d by %d", tt.v, top, step, tt.top, tt.step)
		}
	}
}

// A bar's segments stack to its total on the scale, and a segment of one
// among thousands is still drawn.
func TestLayoutStacksBarsOnTheScale(t *testing.T) {
	t.Parallel()
	rg := chartRanges[0]
	c := layout("t", "per minute", time.Now(), rg, []series{
		{name: "succeeded", counts: map[int]int64{0: 3, 1: 4000}},
		{name: "failed", counts: map[int]int64{0: 2, 1: 1}},
	})
	if c.Max != 5000 || len(c.Scale) != 6 || c.Scale[5].Y != plotTop || c.Scale[0].Y != plotBottom {
		t.Fatalf("scale = %d, %+v", c.Max, c.Scale)
	}
	small := c.Bars[0].Segments
	if len(small) != 2 || small[0].Y+small[0].Height != plotBottom || small[1].Y+small[1].Height != small[0].Y || small[1].Height < 1 {
		t.Fatalf("bar of 3 and 2: %+v", small)
	}
	big := c.Bars[1].Segments
	want := plotBottom - 4000.0/5000*(plotBottom-plotTop)
	if len(big) != 2 || big[0].Y != hundredths(want) || big[1].Height != 1 {
		t.Fatalf("bar of 4000 and 1: %+v, want its first to end at %v", big, want)
	}
}
