package limiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Tag is one name=value a request carries, from X-Tollgate-Tags or fixed
// on its managed key. Matching ignores case, like paths.
type Tag struct {
	Name, Value string
}

// Bounds on tags, which clients choose: each one can be a counter.
const (
	MaxTags   = 16
	MaxTagLen = 64
)

func tagByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == ':' || c == '/'
}

// ParseTags reads "k=v,k2=v2" (spaces around items allowed) into tags
// sorted by name. An empty string is no tags. Every problem is an error:
// a malformed item, a name given twice, more than MaxTags.
func ParseTags(s string) ([]Tag, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tags []Tag
	var errs []error
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("tag %q is not name=value", item))
			continue
		}
		if err := checkTagPart("tag", name); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkTagPart("value", value); err != nil {
			errs = append(errs, err)
			continue
		}
		tags = append(tags, Tag{Name: name, Value: value})
	}
	if len(tags) > MaxTags {
		errs = append(errs, fmt.Errorf("%d tags, at most %d", len(tags), MaxTags))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return MergeTags(nil, tags)
}

// MergeTags returns fixed and then the tags of extra that fixed does not
// name, sorted by name: a managed key's own tags win over a client's.
// A name extra gives twice is an error.
func MergeTags(fixed, extra []Tag) ([]Tag, error) {
	out := slices.Clone(fixed)
	seen := make(map[string]bool, len(fixed)+len(extra))
	for _, t := range fixed {
		seen[strings.ToLower(t.Name)] = true
	}
	given := map[string]bool{}
	for _, t := range extra {
		k := strings.ToLower(t.Name)
		if given[k] {
			return nil, fmt.Errorf("tag %q is given twice", t.Name)
		}
		given[k] = true
		if !seen[k] {
			out = append(out, t)
		}
	}
	if len(out) > MaxTags {
		return nil, fmt.Errorf("%d tags, at most %d", len(out), MaxTags)
	}
	slices.SortFunc(out, func(a, b Tag) int { return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) })
	return out, nil
}

// FormatTags is the inverse of ParseTags.
func FormatTags(tags []Tag) string {
	var b strings.Builder
	for i, t := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.Name)
		b.WriteByte('=')
		b.WriteString(t.Value)
	}
	return b.String()
}
