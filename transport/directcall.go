package transport

import "sync"

// directCall is one direct event's scratch (readDirect): the decoded
// arguments' array and Objects, and the ack. It is taken from directCalls
// for the event and given back once the Dispatcher has returned, so that a
// heartbeat is read, handled and answered without garbage: at 30,000
// heartbeats a second from 5,000 sockets the direct path allocated about
// 300 bytes a heartbeat (the array, the Object and its box, the strings
// and their boxes, the ack's closures), ~9 MB/s, a GC cycle every 2-3 s,
// and the seconds with a cycle were the window's slowest.
//
// The strings it decodes are interned in a small cache (names): an event's
// name and its payload's keys repeat from event to event, and a string
// is immutable, so the one decoded earlier serves, boxed once, for the
// handlers to keep as long as they like.
type directCall struct {
	w    *wsTransport // the connection answered, while the event runs; nil after
	id   uint64
	sent bool

	args   [4]any
	obj    [2]Object
	fields [2][maxObjectFields]Field
	objs   int // obj in use

	names [8]internedName
	next  int // the names slot replaced next
}

// internedName is a decoded string, and the same boxed once (nil until a
// value needs it).
type internedName struct {
	s   string
	box any
}

var directCalls = sync.Pool{New: func() any { return new(directCall) }}

// Reply writes the event's ACK packet with body, once: a second reply
// writes nothing, nor does one after release until the scratch serves
// another event, whose ack it would then be: a Dispatcher keeps no ack
// past DirectEvent (see Dispatcher).
func (c *directCall) Reply(body any) {
	if c.w == nil || c.sent {
		return
	}
	c.sent = true
	c.w.writeAck(c.id, body)
}

// release clears what the event left in c and gives c back.
func (c *directCall) release() {
	c.reset()
	directCalls.Put(c)
}

// reset clears what the event left in c: its decoded arguments (a pooled
// scratch must not keep them alive) and its connection.
func (c *directCall) reset() {
	c.w, c.id, c.sent = nil, 0, false
	clear(c.args[:])
	for i := range c.objs {
		clear(c.fields[i][:len(c.obj[i])])
		c.obj[i] = nil
	}
	c.objs = 0
}

// maxInterned is the longest string interned: names and ids, not text,
// which the cache would keep alive.
const maxInterned = 64

// intern returns the cached string equal to b, or caches a new one; nil
// for one longer than maxInterned (not cached).
func (c *directCall) intern(b []byte) *internedName {
	if len(b) > maxInterned {
		return nil
	}
	for i := range c.names {
		if n := &c.names[i]; len(n.s) == len(b) && n.s == string(b) {
			return n
		}
	}
	n := &c.names[c.next]
	c.next = (c.next + 1) % len(c.names)
	*n = internedName{s: string(b)}
	return n
}
