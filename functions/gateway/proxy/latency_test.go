package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/providers"
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

// Answer times are kept for at most maxLatencyKeys providers and models,
// and for no model longer than any real id: a client that names models
// cannot make the gateway keep more.
func TestLatenciesBounded(t *testing.T) {
	var l latencies
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	l.record(latencyKey{"openai", strings.Repeat("m", providers.MaxKeptModelID+1)}, t0, time.Second)
	if len(l.rings) != 0 {
		t.Fatalf("a model of %d bytes was kept", providers.MaxKeptModelID+1)
	}
	for i := range maxLatencyKeys + 10 {
		l.record(latencyKey{"openai", fmt.Sprintf("m%d", i)}, t0, time.Second)
	}
	if len(l.rings) != maxLatencyKeys {
		t.Fatalf("%d keys kept, want %d", len(l.rings), maxLatencyKeys)
	}
	if _, n := l.p95(latencyKey{"openai", "m0"}, t0, t0.Add(time.Second)); n != 1 {
		t.Fatalf("a key kept lost its answer: %d", n)
	}
}

// A ring keeps the last latencySamples answers, the oldest overwritten,
// and holds no more room than its answers need until it is full.
func TestLatencyRingKeepsTheLast(t *testing.T) {
	var r latencyRing
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r.add(latencySample{t0, time.Millisecond})
	if cap(r.samples) > 8 {
		t.Fatalf("one answer holds room for %d", cap(r.samples))
	}
	for i := 1; i < latencySamples+100; i++ {
		r.add(latencySample{t0.Add(time.Duration(i) * time.Second), time.Duration(i) * time.Millisecond})
	}
	if len(r.samples) != latencySamples || cap(r.samples) > latencySamples {
		t.Fatalf("%d samples in room for %d, want %d", len(r.samples), cap(r.samples), latencySamples)
	}
	oldest := t0.Add(100 * time.Second)
	seen := map[time.Time]bool{}
	for _, s := range r.samples {
		if s.at.Before(oldest) || seen[s.at] {
			t.Fatalf("sample of %v kept: the last %d answers are from %v on, each once", s.at, latencySamples, oldest)
		}
		seen[s.at] = true
	}
}
