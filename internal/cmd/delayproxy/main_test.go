package main

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// A round trip through the proxy takes at least 2·delay, and every byte
// arrives, in order, both ways.
func TestDelayProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const delay = 20 * time.Millisecond
	go serve(ln, echo.Addr().String(), delay)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.Write([]byte("x"))
	one := make([]byte, 1)
	if _, err := io.ReadFull(c, one); err != nil || one[0] != 'x' {
		t.Fatalf("echo: %q %v", one, err)
	}
	if rt := time.Since(start); rt < 2*delay {
		t.Errorf("round trip %v, want at least %v", rt, 2*delay)
	}
	data := make([]byte, 1<<20)
	rand.Read(data)
	go c.Write(data)
	got := make([]byte, len(data))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("1 MiB through the proxy: %v, equal %v", err, bytes.Equal(got, data))
	}
}
