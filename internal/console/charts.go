package console

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/internal/deliveries"
	"github.com/hookgate/hookgate/internal/dispatch"
	"github.com/hookgate/hookgate/internal/store"
)

// chartRange is a span the overview charts, cut into equal buckets.
type chartRange struct {
	name    string
	span    time.Duration
	bucket  time.Duration
	refresh time.Duration // how stale the charts may be
}

// chartRanges are the overview's spans: the last hour by the minute, and the
// last day by the quarter hour (a bar a minute would be 1,440 bars).
var chartRanges = []chartRange{
	{name: "hour", span: time.Hour, bucket: time.Minute, refresh: 5 * time.Second},
	{name: "day", span: 24 * time.Hour, bucket: 15 * time.Minute, refresh: time.Minute},
}

// overviewCharts are the overview's charts of one range.
type overviewCharts struct {
	// Deliveries has one chart per provider, stacked by delivery state.
	Deliveries []Chart
	// Forwards is every route's attempts, stacked by outcome.
	Forwards Chart
	At       time.Time
}

// Chart is a stacked bar chart, laid out for an SVG of Width by Height.
type Chart struct {
	Title string
	// Unit says what one bar counts ("per minute").
	Unit   string
	Width  int
	Height int
	Bars   []Bar
	Legend []Swatch
	// Max is the top of the scale; Total all bars together.
	Max, Total int64
	// Labels are the time axis' ticks.
	Labels []Tick
	// Scale holds the count axis' ticks, from 0 up to Max.
	Scale []ScaleTick
}

// Bar is one bucket's stacked segments.
type Bar struct {
	X, Width int
	Segments []Segment
	// Title is the bucket's time and counts, shown on hover.
	Title string
}

// Segment is one series' part of a bar. Heights are not rounded to whole
// units, so that a bar ends exactly at its value on the scale.
type Segment struct {
	Y, Height float64
	Class     string
}

// Swatch is one series in the legend.
type Swatch struct {
	Name, Class string
	Total       int64
}

// Tick is a label on the time axis.
type Tick struct {
	X    int
	Text string
}

// ScaleTick is a value on the count axis: its gridline's height, and its
// label's baseline (a little lower, so that the label is centred on the line).
type ScaleTick struct {
	Y, TextY float64
	Value    int64
}

// chart geometry: the plot is inset for the axis labels.
const (
	chartWidth  = 720
	chartHeight = 180
	plotTop     = 8
	plotBottom  = 156 // the time axis' labels go below
	plotLeft    = 40  // the scale's labels go left
)

// series is counts by bucket index, for one named series.
type series struct {
	name   string
	counts map[int]int64
}

// layout builds a chart of the buckets from start, stacking series in order.
func layout(title, unit string, start time.Time, rg chartRange, all []series) Chart {
	n := int(rg.span / rg.bucket)
	c := Chart{Title: title, Unit: unit, Width: chartWidth, Height: chartHeight}
	totals := make([]int64, n)
	for _, s := range all {
		var sum int64
		for i, v := range s.counts {
			if i >= 0 && i < n {
				totals[i] += v
				sum += v
			}
		}
		c.Legend = append(c.Legend, Swatch{Name: s.name, Class: "s-" + s.name, Total: sum})
		c.Total += sum
	}
	plotW := chartWidth - plotLeft - 4
	const plotH = plotBottom - plotTop
	top, every := scale(slices.Max(totals))
	c.Max = top
	height := func(v int64) float64 { return float64(v) / float64(top) * plotH }
	for v := int64(0); v <= top; v += every {
		y := hundredths(plotBottom - height(v))
		c.Scale = append(c.Scale, ScaleTick{Y: y, TextY: y + 4, Value: v})
	}
	step := float64(plotW) / float64(n)
	for i := 0; i < n; i++ {
		x := plotLeft + int(float64(i)*step)
		w := max(1, int(float64(i+1)*step)-int(float64(i)*step)-1)
		at := start.Add(time.Duration(i) * rg.bucket)
		bar := Bar{X: x, Width: w, Title: at.UTC().Format("15:04") + " UTC: " + strconv.FormatInt(totals[i], 10)}
		var below int64             // the counts of the segments below
		prev := float64(plotBottom) // the top of the segment below
		for _, s := range all {
			v := s.counts[i]
			if v == 0 {
				continue
			}
			// At least a unit high, so that one failure among thousands shows.
			y := hundredths(min(plotBottom-height(below+v), prev-1))
			bar.Segments = append(bar.Segments, Segment{Y: y, Height: hundredths(prev - y), Class: "s-" + s.name})
			prev, below = y, below+v
			bar.Title += fmt.Sprintf(", %s %d", s.name, v)
		}
		c.Bars = append(c.Bars, bar)
		if ticks := n / 6; ticks > 0 && i%ticks == 0 {
			c.Labels = append(c.Labels, Tick{X: x, Text: at.UTC().Format("15:04")})
		}
	}
	return c
}

// hundredths rounds a coordinate to a hundredth of a unit, which is finer
// than any screen shows and keeps the SVG short.
func hundredths(v float64) float64 { return math.Round(v*100) / 100 }

// scale returns the top of a count axis that holds v, and the step between
// its ticks: 1, 2 or 5 times a power of ten, the smallest that reaches v in
// at most 5 steps. The top is then 3 to 5 steps above 0, and at least 3, so
// that a chart of a few counts (or none) still has ticks at 1, 2 and 3.
func scale(v int64) (top, step int64) {
	v = max(v, 3)
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			step = m * p
			if n := (v + step - 1) / step; n <= 5 {
				return n * step, step
			}
		}
	}
}

// chartStates are the delivery states a chart stacks, bottom up.
var chartStates = []string{dispatch.Succeeded, dispatch.Superseded, dispatch.Pending, dispatch.Running,
	dispatch.Retrying, dispatch.Cancelled, dispatch.Discarded, "stored", deliveries.Invalid}

// readCharts reads the range's counts: deliveries by the minute of their
// first receipt, provider and present state (store.DeliveriesPerBucket);
// forwards by minute and outcome (store.ForwardsPerBucket).
func (c *Console) readCharts(ctx context.Context, rg chartRange) (overviewCharts, error) {
	now, err := store.DatabaseNow(ctx, c.Pool)
	if err != nil {
		return overviewCharts{}, fmt.Errorf("charts: %w", err)
	}
	end := now.Truncate(rg.bucket).Add(rg.bucket)
	start := end.Add(-rg.span)
	byProvider := map[string]map[string]map[int]int64{} // provider → state → bucket → n
	counts, err := store.DeliveriesPerBucket(ctx, c.Pool, store.DeliveriesPerBucketParams{
		Since: start, Bucket: rg.bucket, States: deliveries.States})
	if err != nil {
		return overviewCharts{}, fmt.Errorf("charts: %w", err)
	}
	for _, n := range counts {
		state := "stored" // no dispatch
		if n.Rank > 0 && n.Rank <= len(deliveries.States) {
			state = deliveries.States[n.Rank-1]
		}
		if byProvider[n.Provider] == nil {
			byProvider[n.Provider] = map[string]map[int]int64{}
		}
		if byProvider[n.Provider][state] == nil {
			byProvider[n.Provider][state] = map[int]int64{}
		}
		byProvider[n.Provider][state][n.Bucket] += n.Count
	}
	unit := "per " + bucketName(rg.bucket)
	out := overviewCharts{At: now}
	for _, p := range c.Providers.Names() {
		var all []series
		for _, st := range chartStates {
			all = append(all, series{name: st, counts: byProvider[p][st]})
		}
		out.Deliveries = append(out.Deliveries, layout("Deliveries from "+p, unit, start, rg, all))
	}

	succeeded, failed := map[int]int64{}, map[int]int64{}
	forwards, err := store.ForwardsPerBucket(ctx, c.Pool, start, rg.bucket)
	if err != nil {
		return overviewCharts{}, fmt.Errorf("charts: %w", err)
	}
	for _, n := range forwards {
		succeeded[n.Bucket], failed[n.Bucket] = n.Succeeded, n.Failed
	}
	out.Forwards = layout("Forward attempts, all routes", unit, start, rg,
		[]series{{name: "succeeded", counts: succeeded}, {name: "failed", counts: failed}})
	return out, nil
}

func bucketName(d time.Duration) string {
	if d == time.Minute {
		return "minute"
	}
	return strconv.Itoa(int(d.Minutes())) + " minutes"
}
