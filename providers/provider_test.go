package providers

import (
	"fmt"
	"testing"
)

// Every operation's name reads back as the operation; any other value
// names itself by number, and no name reads as it.
func TestOpNames(t *testing.T) {
	named := 0
	for i := range 256 {
		o := Op(i)
		s := o.String()
		back, ok := ParseOp(s)
		if i >= int(OpChat) && i <= int(OpRealtime) {
			named++
			if !ok || back != o || s == "" {
				t.Errorf("op %d: %q reads back as %v, %v", i, s, back, ok)
			}
			continue
		}
		if want := fmt.Sprintf("op(%d)", i); s != want || ok {
			t.Errorf("op %d: %q (%v), want %q and no operation", i, s, ok, want)
		}
	}
	if _, ok := ParseOp(""); ok || named != 10 {
		t.Errorf("the empty name is an operation, or %d named, want 10", named)
	}
}
