package transport

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// poller parks idle websocket readers on one epoll instance, so that a
// connection with nothing to read holds no goroutine: an idle socket's
// reader was a goroutine blocked in Read, 4-8 KB of stack each (see
// park in wstransport.go). One goroutine waits on epoll for the
// whole process; when a parked connection becomes readable (data, the
// peer's FIN, an error) it hands it to a reader goroutine (start).
//
// Registrations are one-shot (EPOLLONESHOT): a connection is reported once
// and then stays disarmed until its reader parks it again, so one reader at
// most runs per connection. Level-triggered: bytes that arrived between the
// reader's last empty read and its re-arming are reported at once. The
// epoll fd itself waits in the Go runtime's netpoller (see file).
//
// The epoll data is a registration number, not the fd: a closed fd leaves
// the epoll set by itself and its number can be reused by a new
// connection, while a number is never given twice.
type poller struct {
	epfd int
	// file is epfd as the Go runtime's netpoller sees it (raw: its
	// RawConn): epoll_wait runs only when the runtime reports epfd
	// readable, so that no thread is held blocked in the syscall, and with
	// it, for up to 10 ms on a quiet node, one of GOMAXPROCS Ps (sysmon
	// retakes a P from a blocking syscall late when others are idle).
	file *os.File
	raw  syscall.RawConn
	idle chan *wsTransport // to a reader goroutine waiting for a connection

	mu    sync.Mutex
	conns map[uint64]*wsTransport
	next  uint64
}

var (
	pollerOnce sync.Once
	thePoller  *poller // nil where epoll could not be set up
)

// sharedPoller returns the process's poller, started on first use, or nil
// (readers then block in Read, one goroutine per connection, as before).
func sharedPoller() *poller {
	pollerOnce.Do(func() {
		p, err := newPoller()
		if err != nil {
			slog.Warn("websocket readers: epoll unavailable, one goroutine per connection", "err", err)
			return
		}
		thePoller = p
		go thePoller.loop()
	})
	return thePoller
}

func newPoller() (*poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	// A non-blocking fd given to os.NewFile joins the runtime's poller.
	f := os.NewFile(uintptr(fd), "epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &poller{epfd: fd, file: f, raw: rc, idle: make(chan *wsTransport), conns: map[uint64]*wsTransport{}}, nil
}

const pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// arm registers w's connection (the first time) or re-arms it, to be
// reported once when it becomes readable. An error means the connection
// is closed (or cannot be polled): the caller reads it instead.
func (p *poller) arm(w *wsTransport) error {
	p.mu.Lock()
	first := w.pollID == 0
	if first {
		p.next++
		w.pollID = p.next
		p.conns[w.pollID] = w
	}
	id := w.pollID
	p.mu.Unlock()
	ev := syscall.EpollEvent{Events: pollEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	op := syscall.EPOLL_CTL_MOD
	if first {
		op = syscall.EPOLL_CTL_ADD
	}
	var ctlErr error
	err := w.raw.Control(func(fd uintptr) {
		ctlErr = syscall.EpollCtl(p.epfd, op, int(fd), &ev)
	})
	if err = errors.Join(err, ctlErr); err != nil && first {
		// closed before its first park: OnClose may have run already
		p.forget(w)
	}
	return err
}

// forget drops w's registration (its connection has closed: the kernel has
// removed the fd from the epoll set with its last close).
func (p *poller) forget(w *wsTransport) {
	p.mu.Lock()
	if w.pollID != 0 {
		delete(p.conns, w.pollID)
	}
	p.mu.Unlock()
}

// registered returns the number of registered connections, and how many
// of them are parked.
func (p *poller) registered() (n, parked int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.conns {
		if w.parked.Load() {
			parked++
		}
	}
	return len(p.conns), parked
}

func (p *poller) loop() {
	events := make([]syscall.EpollEvent, 256)
	for {
		var n int
		var err error
		rerr := p.raw.Read(func(fd uintptr) bool {
			n, err = syscall.EpollWait(int(fd), events, 0)
			// done unless nothing is ready: the runtime then waits for
			// epfd to become readable (an event) and calls again
			return n > 0 || err != nil && !errors.Is(err, syscall.EINTR)
		})
		if err = errors.Join(rerr, err); err != nil {
			// Not expected on a valid epoll fd. Parked connections would
			// never be read again: give up loudly; their heartbeats time
			// out and the engine closes them.
			slog.Error("websocket readers: epoll_wait failed; parked connections are no longer read", "err", err)
			return
		}
		p.mu.Lock()
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if w := p.conns[id]; w != nil && w.parked.CompareAndSwap(true, false) {
				p.start(w)
			}
		}
		p.mu.Unlock()
	}
}

// start runs w's reader on a reader goroutine that waits for work, or on
// a new one. Readers are kept between wakes because the library's path
// runs deep: a new goroutine's 2 KB stack was grown (copied) to 8-16 KB on
// nearly every wake, 5 % of a connect burst's CPU.
func (p *poller) start(w *wsTransport) {
	select {
	case p.idle <- w:
	default:
		go p.reader(w)
	}
}

// readerIdle is how long a reader goroutine waits for another connection
// to read before it ends.
const readerIdle = ParkAfter

func (p *poller) reader(w *wsTransport) {
	t := time.NewTimer(readerIdle)
	defer t.Stop()
	for {
		w.read()
		t.Reset(readerIdle)
		select {
		case w = <-p.idle:
		case <-t.C:
			return
		}
	}
}

// PolledConnections is the number of websocket connections registered with
// the poller and not closed yet, and how many of them are parked (0, 0
// where there is no poller).
func PolledConnections() (n, parked int) {
	if p := sharedPoller(); p != nil {
		return p.registered()
	}
	return 0, 0
}
