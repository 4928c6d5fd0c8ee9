package admission

import (
	"encoding/base64"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"testing"
)

// leaseIDByDecoding is leaseID as it was, the id decoded and encoded
// through strings: the reference TestLeaseID holds it to.
func leaseIDByDecoding(reqID string, pass, target int) string {
	id := reqID
	if b, err := hex.DecodeString(reqID); err == nil && len(b) >= 12 {
		id = base64.RawURLEncoding.EncodeToString(b[:12])
	}
	if len(id) > 40 {
		id = id[:40]
	}
	return id + "." + strconv.Itoa(pass) + "." + strconv.Itoa(target)
}

// A request id in hex (the gateway's own) is made compact, any other id
// is kept (up to 40 bytes), as before the id was decoded in place.
func TestLeaseID(t *testing.T) {
	ids := []string{"", "abc", "0123456789abcdef0123456789abcdef", "0123456789ABCDEF01234567", "0123456789abcdef0123456",
		"0123456789abcdef0123456g", "req-" + string(make([]byte, 60)), "0123456789abcdef01234567890"}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 2000 {
		alphabet := "0123456789abcdefABCDEFxyz-"
		if i%2 == 0 {
			alphabet = alphabet[:22] // hex digits only
		}
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		ids = append(ids, string(b))
	}
	for _, id := range ids {
		for _, pass := range []int{0, 3} {
			if got, want := leaseID(id, pass, 1), leaseIDByDecoding(id, pass, 1); got != want {
				t.Fatalf("leaseID(%q) = %q, want %q", id, got, want)
			}
		}
	}
}
