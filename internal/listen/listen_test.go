package listen_test

import (
	"testing"

	"github.com/hookgate/hookgate/internal/listen"
)

// An event id names its stream and its offer; anything else is no id, and a
// stream resumes nothing after it.
func TestEventIDs(t *testing.T) {
	stream := listen.NewStreamID()
	id := listen.EventID(stream, 42)
	if s, seq, ok := listen.ParseEventID(" " + id + " "); !ok || s != stream || seq != 42 {
		t.Fatalf("ParseEventID(%s) = %s, %d, %v", id, s, seq, ok)
	}
	for _, bad := range []string{"", "42", stream, stream + "-", stream + "-0", stream + "--1", stream + "-x", "s0123456789abcdeZ-1", "t0123456789abcdef-1", "s0123456789abcdef0-1"} {
		if _, _, ok := listen.ParseEventID(bad); ok {
			t.Errorf("ParseEventID(%q) took it", bad)
		}
	}
}
