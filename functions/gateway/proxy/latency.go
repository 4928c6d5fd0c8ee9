package proxy

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/providers"
)

// The gateway keeps, per provider and per provider/model, the latency of
// its last answered non-streaming requests, for ramps to hold when the
// upstream slows down. In process: an instance that steps a ramp judges by
// what it saw itself.

const latencySamples = 1024

type latencySample struct {
	at time.Time
	d  time.Duration
}

// latencyRing keeps the last latencySamples answers of a key. It grows
// with the answers it is given, up to that, then overwrites the oldest:
// a key with few answers (a model a client named once) costs as little
// as they take, not the whole ring's 32 KiB.
type latencyRing struct {
	samples []latencySample
	next    int // where the next sample goes once the ring is full
}

// add keeps s, over the oldest sample once the ring is full.
func (r *latencyRing) add(s latencySample) {
	if len(r.samples) < latencySamples {
		if len(r.samples) == cap(r.samples) { // doubled, never past the ring's size
			grown := make([]latencySample, len(r.samples), min(max(2*cap(r.samples), 4), latencySamples))
			copy(grown, r.samples)
			r.samples = grown
		}
		r.samples = append(r.samples, s)
		return
	}
	r.samples[r.next] = s
	r.next = (r.next + 1) % latencySamples
}

type latencies struct {
	mu    sync.Mutex
	rings map[latencyKey]*latencyRing
}

// latencyKey names what latencies are kept of: a provider and a model, or
// "*" for any of its models, case folded (admission.CooldownKey's and
// ProviderKey's "provider/model" and "provider/*", not joined).
type latencyKey struct{ provider, model string }

// latencyKeysOf are the keys target t's answer times are kept under.
func latencyKeysOf(t providers.Target) (model, provider latencyKey) {
	p := strings.ToLower(t.Provider.Name())
	return latencyKey{p, strings.ToLower(t.Model)}, latencyKey{p, "*"}
}

// maxLatencyKeys bounds the providers and models whose answer times are
// kept; none is kept of a model longer than providers.MaxKeptModelID.
const maxLatencyKeys = 4096

func (l *latencies) record(key latencyKey, at time.Time, d time.Duration) {
	if len(key.model) > providers.MaxKeptModelID {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rings == nil {
		l.rings = map[latencyKey]*latencyRing{}
	}
	r := l.rings[key]
	if r == nil {
		if len(l.rings) >= maxLatencyKeys {
			return // model ids are the client's to choose: bounded
		}
		r = &latencyRing{}
		// The key's own strings: a model may be a slice of a larger one.
		l.rings[latencyKey{strings.Clone(key.provider), strings.Clone(key.model)}] = r
	}
	r.add(latencySample{at, d})
}

// p95 returns the 95th percentile of key's samples in [from, to), and how
// many there were.
func (l *latencies) p95(key latencyKey, from, to time.Time) (time.Duration, int) {
	l.mu.Lock()
	r := l.rings[key]
	var ds []time.Duration
	if r != nil {
		for _, s := range r.samples {
			if !s.at.Before(from) && s.at.Before(to) {
				ds = append(ds, s.d)
			}
		}
	}
	l.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[(len(ds)*95+99)/100-1], len(ds)
}

// minLatencySamples is how many answers an interval needs for its p95 to
// count.
const minLatencySamples = 10

// LatencyDoubled reports whether the p95 latency of the upstream named by
// key ("provider/*" or "provider/model", case folded) over the interval
// before now doubled against the interval before that, on enough answers
// in both.
func (h *Handler) LatencyDoubled(name string, now time.Time, interval time.Duration) bool {
	provider, model, _ := strings.Cut(strings.ToLower(name), "/")
	key := latencyKey{provider, model}
	last, n := h.lat.p95(key, now.Add(-interval), now)
	prev, m := h.lat.p95(key, now.Add(-2*interval), now.Add(-interval))
	return n >= minLatencySamples && m >= minLatencySamples && last > 2*prev
}
