package deliveries

import (
	"slices"
	"testing"
)

// A search reads a page's bodies in chunks of at most searchChunkBytes,
// and a body larger than that alone.
func TestSearchReadsBodiesInBoundedChunks(t *testing.T) {
	const mb = 1 << 20
	sizes := []int64{10 * mb, 6 * mb, 1, 20 * mb, 0, 0, 16 * mb}
	var chunks [][2]int
	for start := 0; start < len(sizes); {
		end := chunkEnd(sizes, start)
		chunks = append(chunks, [2]int{start, end})
		start = end
	}
	want := [][2]int{{0, 2}, {2, 3}, {3, 4}, {4, 7}}
	if !slices.Equal(chunks, want) {
		t.Fatalf("chunks %v, want %v", chunks, want)
	}
}
