package tests

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// partitionProxy is a plain TCP proxy that can cut its clients off from the upstream, as a
// network partition does: Cut closes every forwarded connection, and from then on new
// connections are accepted and held silent (no byte forwarded, none answered) until Heal.
// internal/testkit/pgproxy reads PostgreSQL's protocol; this one knows nothing of what it carries,
// so it stands between an executor and the service's HTTP port.
type partitionProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	cut      bool
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func startPartitionProxy(t *testing.T, upstream string) *partitionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &partitionProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's http:// address.
func (p *partitionProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Cut partitions the proxy's clients from the upstream.
func (p *partitionProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.closeAll()
}

// Heal ends the partition: held connections are closed (their clients see an error and
// connect again), and new ones are forwarded.
func (p *partitionProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.closeAll()
}

func (p *partitionProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *partitionProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return p.cut
}

func (p *partitionProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

func (p *partitionProxy) serve(client net.Conn) {
	defer client.Close()
	if p.track(client) {
		// Held silent: read and drop until Heal or Cleanup closes it.
		_, _ = io.Copy(io.Discard, client)
		return
	}
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer server.Close()
	if p.track(server) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}
