package limiter

import (
	"errors"
	"fmt"
	"strings"
)

// MaxUserPathLen bounds a user path, so a header cannot make counter keys or
// log lines arbitrarily long.
const MaxUserPathLen = 512

// ParseUserPath checks that p is a user path: "/" or "/"-separated segments
// with no empty, "." or ".." segment and no control characters. A path that
// breaks a rule is refused, never cleaned into another path: "/team//a" is
// an error, not "/team/a".
func ParseUserPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("user path is empty")
	}
	if len(p) > MaxUserPathLen {
		return "", fmt.Errorf("user path is longer than %d bytes", MaxUserPathLen)
	}
	if p[0] != '/' {
		return "", fmt.Errorf("user path %q does not start with '/'", p)
	}
	if p == "/" {
		return p, nil
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("user path %q contains a control character", p)
		}
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		switch seg {
		case "":
			return "", fmt.Errorf("user path %q has an empty segment", p)
		case ".", "..":
			return "", fmt.Errorf("user path %q has a %q segment", p, seg)
		}
	}
	return p, nil
}

// PathWithin reports whether path is ancestor or below it, at segment
// boundaries and ignoring case: /team covers /team/app but not /team-alpha.
// Both must be valid user paths.
func PathWithin(path, ancestor string) bool {
	if ancestor == "/" {
		return true
	}
	if len(path) < len(ancestor) || !strings.EqualFold(path[:len(ancestor)], ancestor) {
		return false
	}
	return len(path) == len(ancestor) || path[len(ancestor)] == '/'
}
