package lru

import (
	"strconv"
	"testing"
)

func TestBoundedAndRecent(t *testing.T) {
	c := New[string, int](3)
	for i := range 10 {
		c.Put(strconv.Itoa(i), i)
		if c.Len() > 3 {
			t.Fatalf("%d entries in a cache of 3", c.Len())
		}
	}
	if _, ok := c.Get("6"); ok {
		t.Fatal("the least recently used entry was kept")
	}
	c.Get("7") // 7 is now the most recent: 8 goes next
	c.Put("x", 0)
	if _, ok := c.Get("7"); !ok {
		t.Fatal("a recently read entry was dropped")
	}
	if _, ok := c.Get("8"); ok {
		t.Fatal("the least recently used entry was kept")
	}
	c.Update("7", func(old int, found bool) int {
		if !found || old != 7 {
			t.Fatalf("Update saw %d, %v", old, found)
		}
		return 70
	})
	if v, _ := c.Get("7"); v != 70 {
		t.Fatalf("after Update: %d", v)
	}
	c.Delete("7")
	if _, ok := c.Get("7"); ok || c.Len() != 2 {
		t.Fatalf("after Delete: len %d", c.Len())
	}
}
