package limiter_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// reference is a brute-force model of the rule semantics: it keeps every
// admitted request and recomputes every count from scratch with exact
// rationals. It shares no code with the limiter.
type reference struct {
	rules    []limiter.Rule
	admitted []refEvent
}

type refEvent struct {
	at        time.Time
	path      string
	provider  string
	tokens    int64
	done      time.Time // completion; zero while in flight
	expiresAt time.Time
}

func (ref *reference) matches(r limiter.Rule, path, provider string) bool {
	switch r.Scope {
	case limiter.ScopeUserPath:
		return limiter.PathWithin(path, r.Subject)
	case limiter.ScopeProvider:
		return provider == r.Subject
	}
	return false
}

// admits reports whether a request would be admitted at now.
func (ref *reference) admits(now time.Time, path, provider string, tokens int64) bool {
	for _, r := range ref.rules {
		if !ref.matches(r, path, provider) {
			continue
		}
		if r.Period == limiter.Concurrent {
			n := int64(0)
			for _, e := range ref.admitted {
				if ref.matches(r, e.path, e.provider) && !e.at.After(now) &&
					(e.done.IsZero() || e.done.After(now)) && e.expiresAt.After(now) {
					n++
				}
			}
			if n+1 > r.MaxRequests {
				return false
			}
			continue
		}
		T := int64(r.Period)
		w := floorDiv(now.UnixNano(), T)
		elapsed := now.UnixNano() - w*T
		var prevReq, curReq, prevTok, curTok int64
		for _, e := range ref.admitted {
			if !ref.matches(r, e.path, e.provider) {
				continue
			}
			switch floorDiv(e.at.UnixNano(), T) {
			case w:
				curReq++
				curTok += e.tokens
			case w - 1:
				prevReq++
				prevTok += e.tokens
			}
		}
		estimate := func(prev, cur, amount int64) *big.Rat {
			x := new(big.Rat).Mul(new(big.Rat).SetInt64(prev), big.NewRat(T-elapsed, T))
			return x.Add(x, new(big.Rat).SetInt64(cur+amount))
		}
		if r.MaxRequests > 0 && estimate(prevReq, curReq, 1).Cmp(new(big.Rat).SetInt64(r.MaxRequests)) > 0 {
			return false
		}
		if r.MaxTokens > 0 && estimate(prevTok, curTok, tokens).Cmp(new(big.Rat).SetInt64(r.MaxTokens)) > 0 {
			return false
		}
	}
	return true
}

// firstAdmit finds by bisection the earliest instant at or after now at
// which the request would be admitted if nothing else arrived, within
// horizon; ok is false if none.
func (ref *reference) firstAdmit(now time.Time, path, provider string, tokens int64, horizon time.Duration) (time.Duration, bool) {
	if !ref.admits(now.Add(horizon), path, provider, tokens) {
		return 0, false
	}
	lo, hi := time.Duration(0), horizon // admits(hi), !admits(lo)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ref.admits(now.Add(mid), path, provider, tokens) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func TestAgainstReference(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkAgainstReference(t, seed, 150) })
	}
}

func FuzzAgainstReference(f *testing.F) {
	f.Add(uint64(1), uint8(80))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		checkAgainstReference(t, seed, int(steps))
	})
}

func checkAgainstReference(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	rules := []limiter.Rule{
		userRule("/", 7*time.Second, 4+rng.Int64N(6), 0),
		userRule("/a", limiter.Minute, 3+rng.Int64N(8), 200+rng.Int64N(800)),
		{Scope: limiter.ScopeUserPath, Subject: "/a/b", Period: limiter.Concurrent, MaxRequests: 1 + rng.Int64N(3)},
		{Scope: limiter.ScopeProvider, Subject: "p1", Period: 13 * time.Second, MaxRequests: 2 + rng.Int64N(5), MaxTokens: 300 + rng.Int64N(300)},
	}
	l := newLimiter(t, rules...)
	ref := &reference{rules: rules}
	paths := []string{"/a", "/a/b", "/a/b/c", "/x", "/ab"}
	providers := []string{"p1", "p2"}
	now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
	type live struct {
		lease *limiter.Lease
		idx   int
	}
	var inFlight []live
	for step := range steps {
		now = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
		// Complete a random in-flight request now and then.
		if len(inFlight) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(inFlight))
			lv := inFlight[k]
			if err := l.Complete(context.Background(), now, lv.lease, limiter.Usage{Exact: true}); err != nil {
				t.Fatal(err)
			}
			ref.admitted[lv.idx].done = now
			inFlight = append(inFlight[:k], inFlight[k+1:]...)
		}
		path := paths[rng.IntN(len(paths))]
		provider := providers[rng.IntN(len(providers))]
		tokens := rng.Int64N(250)
		r := request(path, provider, "m")
		r.InputTokens = tokens
		d, err := l.Admit(context.Background(), now, r)
		if err != nil {
			t.Fatal(err)
		}
		want := ref.admits(now, path, provider, tokens)
		if d.Allowed != want {
			t.Fatalf("step %d at %v: %s via %s, %d tokens: limiter admitted=%v, reference %v",
				step, now.Sub(t0), path, provider, tokens, d.Allowed, want)
		}
		if d.Allowed {
			ref.admitted = append(ref.admitted, refEvent{at: now, path: path, provider: provider, tokens: tokens, expiresAt: now.Add(limiter.DefaultLeaseTTL)})
			if d.Lease != nil {
				inFlight = append(inFlight, live{d.Lease, len(ref.admitted) - 1})
			}
			continue
		}
		if d.Refused.Kind == limiter.KindInFlight {
			continue // a slot frees when something completes: no exact wait
		}
		if !d.Refused.Retryable {
			if _, ok := ref.firstAdmit(now, path, provider, tokens, 3*time.Minute); ok {
				t.Fatalf("step %d: limiter says never, reference admits later", step)
			}
			continue
		}
		// Only a wait that concurrency does not cut short can be checked
		// against the reference: leave the in-flight rule out of reach.
		if path == "/a/b" || path == "/a/b/c" {
			continue
		}
		got := d.Refused.RetryAfter
		wantWait, ok := ref.firstAdmit(now, path, provider, tokens, 3*time.Minute)
		if !ok || got != wantWait {
			t.Fatalf("step %d at %v: %s via %s, %d tokens: RetryAfter %v, reference %v (found %v); refused by %s",
				step, now.Sub(t0), path, provider, tokens, got, wantWait, ok, d.Refused.Message())
		}
	}
}
