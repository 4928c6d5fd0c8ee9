package proxy

import (
	"testing"
	"time"
)

// A ramp holds when the upstream's p95 latency doubled over its last
// interval, on enough answers in both intervals.
func TestLatencyDoubled(t *testing.T) {
	h := &Handler{}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	const every = time.Minute
	for i := range 20 {
		h.lat.record(latencyKey{"openai", "*"}, t0.Add(time.Duration(i)*time.Second), 100*time.Millisecond)
	}
	for i := range 20 {
		h.lat.record(latencyKey{"openai", "*"}, t0.Add(every+time.Duration(i)*time.Second), 150*time.Millisecond)
	}
	if h.LatencyDoubled("OpenAI/*", t0.Add(2*every), every) {
		t.Fatal("1.5 times slower is not doubled")
	}
	for i := range 20 {
		h.lat.record(latencyKey{"openai", "*"}, t0.Add(2*every+time.Duration(i)*time.Second), 400*time.Millisecond)
	}
	if !h.LatencyDoubled("openai/*", t0.Add(3*every), every) {
		t.Fatal("from 150 ms to 400 ms is more than double")
	}
	if h.LatencyDoubled("openai/gpt-4o", t0.Add(3*every), every) {
		t.Fatal("a model with no answers recorded did not slow down")
	}
}
