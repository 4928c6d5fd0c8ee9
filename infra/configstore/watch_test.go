package configstore

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
)

// Due tells exactly when Refresh looks at the store: at first, once the
// interval has passed since the last look, when the clock went back
// before it; never while another request is looking.
func TestWatcherDueIsWhenRefreshLooks(t *testing.T) {
	l, err := limiter.New(limiter.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(NewMemory(), nil, l, 2*time.Second, nil)
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		at  time.Duration
		due bool
	}{
		{0, true},                        // nothing loaded yet
		{time.Second, false},             // within the interval
		{1999 * time.Millisecond, false}, // still within
		{2 * time.Second, true},          // the interval has passed
		{3 * time.Second, false},
		{time.Second, true}, // the clock went back before the last look
		{1500 * time.Millisecond, false},
		{10 * time.Second, true},
	} {
		now := t0.Add(c.at)
		if got := w.Due(now); got != c.due {
			t.Fatalf("step %d, %v in: Due %v, want %v", i, c.at, got, c.due)
		}
		before := w.checked
		w.Refresh(context.Background(), now)
		if looked := !w.checked.Equal(before); looked != c.due {
			t.Fatalf("step %d, %v in: Refresh looked %v, Due said %v", i, c.at, looked, c.due)
		}
	}
	w.mu.Lock()
	w.checking = true // another request is looking
	w.mu.Unlock()
	if w.Due(t0.Add(time.Hour)) {
		t.Fatal("Due while another request looks")
	}
}
