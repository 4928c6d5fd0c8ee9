package proxy

import (
	"runtime"
	"strings"
	"testing"
)

// The model a chat names is kept after its request (a route's target, a
// key of the latencies kept); the body it was read from is not kept with
// it.
func TestModelKeepsNotItsBody(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", 8<<20) + `"}]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, fast := parseChat(body, true)
	if !fast || req.Model == nil || *req.Model != "gpt-4o" {
		t.Fatalf("parsed %v, %v", req.Model, fast)
	}
	model := *req.Model
	req = chatRequest{}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 2<<20 {
		t.Fatalf("the model %q keeps %d bytes alive", model, grown)
	}
	runtime.KeepAlive(body)
	runtime.KeepAlive(model)
}
