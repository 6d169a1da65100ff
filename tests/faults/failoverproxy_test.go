//go:build faults

package faults

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// failoverProxy forwards TCP connections to the current target, as a VIP or HAProxy in
// front of PostgreSQL does. When the target's side of a connection ends, it closes the
// client's side (the client reads EOF, not a reset); switchTo points new connections at
// another server and closes the existing ones one after the other, in the order they were
// accepted. A connection it cannot forward is accepted and closed at once.
type failoverProxy struct {
	addr string

	mu     sync.Mutex
	target string
	ln     net.Listener
	conns  []net.Conn // client and server sides, in accept order
	wg     sync.WaitGroup
}

func startFailoverProxy(t *testing.T, target string) *failoverProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &failoverProxy{addr: ln.Addr().String(), target: target, ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
		p.wg.Wait()
	})
	return p
}

func (p *failoverProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		out, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

func (p *failoverProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// switchTo sends new connections to target and closes the existing ones in order.
func (p *failoverProxy) switchTo(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.closeAll()
}

func (p *failoverProxy) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
