// Package lru is a bounded cache: every cache keyed by something a client
// chooses (a model name, a key, a per-child path) holds at most a fixed
// number of entries, dropping the least recently used.
package lru

import (
	"container/list"
	"sync"
)

// Cache is a fixed-size LRU cache, safe for concurrent use.
type Cache[K comparable, V any] struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// New returns a cache of at most size entries (at least 1).
func New[K comparable, V any](size int) *Cache[K, V] {
	return &Cache[K, V]{max: max(size, 1), ll: list.New(), items: map[K]*list.Element{}}
}

// Get returns the value for k and marks it used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*entry[K, V]).val, true
	}
	var zero V
	return zero, false
}

// Put sets the value for k, dropping the least recently used entry when
// the cache is full.
func (c *Cache[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(k, v)
}

func (c *Cache[K, V]) put(k K, v V) {
	if e, ok := c.items[k]; ok {
		e.Value.(*entry[K, V]).val = v
		c.ll.MoveToFront(e)
		return
	}
	c.items[k] = c.ll.PushFront(&entry[K, V]{key: k, val: v})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*entry[K, V]).key)
	}
}

// Update sets k to fn(old, found) atomically; fn must not use the cache.
func (c *Cache[K, V]) Update(k K, fn func(old V, found bool) V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		en := e.Value.(*entry[K, V])
		en.val = fn(en.val, true)
		c.ll.MoveToFront(e)
		return
	}
	var zero V
	c.put(k, fn(zero, false))
}

// Delete removes k.
func (c *Cache[K, V]) Delete(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.ll.Remove(e)
		delete(c.items, k)
	}
}

// Len returns the number of entries.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
